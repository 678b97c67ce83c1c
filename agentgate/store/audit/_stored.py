"""What the log's parts share: a stored note or entry read as text or bytes whatever its row
holds (``_note``, ``_bytes``), a stored entry parsed (``_parsed``; checked against its leaf hash
too, ``_read_entry``), the index an entry's bytes carry when they are a canonical entry
(``_index_of``), a stored index read as the entry index it is (``_stored_index``), a stored number
that is not a whole one named with what it is (``_described``), and an index or size given by a
caller checked (``_whole``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import orjson

from agentgate._shown import quoted
from agentgate.audit.entry import AuditEntry, encode_entry
from agentgate.audit.merkle import leaf_hash, tree_integer
from agentgate.errors import InputError, TamperDetected

if TYPE_CHECKING:
    from agentgate.store._base import Row, Store, Transaction


def blob_column(store: Store, name: str) -> str:
    """Column ``name`` read as bytes whatever type the row holds: SQLite stores what it is given,
    and an entry rewritten with replace() comes back as TEXT (PostgreSQL's BYTEA columns hold
    nothing else)."""
    return f"CAST({name} AS BLOB)" if store.dialect == "sqlite" else name


def no_entry(index: int) -> InputError:
    """The refusal of an entry index that names no entry of the log."""
    return InputError(f"audit log has no entry {quoted(index)}")


def latest_checkpoint_row(store: Store, tx: Transaction | None = None) -> Row | None:
    """``(size, root, note)`` of ``store``'s latest checkpoint (read in ``tx`` when given), the
    largest tree and the last stored of those (root and note read as bytes whatever type SQLite
    holds); ``None`` for none. ``AuditLog`` and the log key's rotation rule
    (``_keys._may_make_key``) read it so."""
    rows = (store.query if tx is None else tx.execute)(
        f"SELECT size, {blob_column(store, 'root')}, {blob_column(store, 'note')} FROM audit_checkpoints "
        "ORDER BY size DESC, id DESC LIMIT 1"
    )
    return rows[0] if rows else None


def _note(value: object) -> str:
    """A stored signed note as text. SQLite's rows are read as bytes (a TEXT column can hold bytes
    that are not UTF-8, which sqlite3 cannot even return): such bytes read with replacement
    characters, a note whose signature then fails instead of an error that stops ``verify``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _described(value: object) -> str:
    """A stored number that is not a whole one (an ``idx``, a size), with what it is: ``NULL``,
    ``'9' (text)``, ``x'09' (bytes)``, ``3.5 (a fraction)``."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"x'{value[:20].hex()}' (bytes)"
    if isinstance(value, float):
        return f"{value!r} (a fraction)"
    return f"{str(value)[:40]!r} (text)"


def _stored_index(value: object) -> int | None:
    """An ``idx`` read from a row as the entry index it is: a whole number (one kept as a real,
    3.0, in a column without a type, included), else ``None``: a fraction, text, bytes or NULL,
    which SQLite keeps only in a table made again without its ``INTEGER PRIMARY KEY``, is the
    index of no entry."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


def _bytes(value: object) -> bytes:
    """A stored entry, leaf hash or root as bytes; a NULL (only in a tampered table) as empty."""
    return b"" if value is None else bytes(value)  # type: ignore[call-overload]


def _parsed(idx: int, data: bytes) -> AuditEntry:
    """The entry stored at ``idx``, parsed from its bytes; ``TamperDetected`` naming ``idx`` when
    they are not a canonical entry (``from_bytes`` says what is wrong, not where it was read)."""
    try:
        return AuditEntry.from_bytes(data)
    except TamperDetected as exc:
        raise TamperDetected(f"audit log: entry {idx} is malformed: {exc}") from exc


def _read_entry(idx: int, row: tuple[bytes, bytes]) -> AuditEntry:
    """The entry a stored ``(entry, leaf_hash)`` row at ``idx`` holds (``_parsed``);
    ``TamperDetected`` too, in ``verify``'s words, when its bytes do not match the leaf hash or do
    not carry ``idx`` (an entry rewritten in the database, canonical all the same: until review
    R83 ``tasks settle`` copied such an ``allow``'s edited fields into the outcome it wrote)."""
    data, stored = row
    entry = _parsed(idx, data)
    if leaf_hash(data) != stored:
        raise TamperDetected(f"audit log: entry {idx} does not match its leaf hash")
    if entry.index != idx:
        raise TamperDetected(f"audit log: entry {idx} does not carry its own index")
    return entry


def _index_of(data: bytes) -> int | None:
    """The ``index`` of the entry whose bytes are ``data``, or ``None`` if they are not exactly a
    canonical entry (what ``AuditEntry.from_bytes`` accepts, checked without building the model:
    this runs for every entry no checkpoint covers yet)."""
    try:
        fields = orjson.loads(data)
    except orjson.JSONDecodeError:
        fields = None
    if not (isinstance(fields, dict) and _encodes_to(fields, data)):
        # orjson reads an integer beyond 64 bits as a float and refuses one beyond a double's
        # range, both of which the log writes in ``args``: the reference parser decides.
        try:
            fields = json.loads(data)
        except (ValueError, RecursionError):
            return None
        if not (isinstance(fields, dict) and _encodes_to(fields, data)):
            return None
    return int(fields["index"])


def _encodes_to(fields: dict[str, Any], data: bytes) -> bool:
    """Whether ``fields`` are an entry whose canonical bytes are ``data``.

    ``encode_entry`` refuses what this version does not write; an entry an earlier version
    wrote may hold it (args nested past ``MAX_DEPTH``): ``AuditEntry.from_bytes``, which reads
    stored entries, then decides."""
    try:
        return encode_entry(fields) == data
    except InputError:
        try:
            AuditEntry.from_bytes(data)
        except TamperDetected:
            return False
        return True


_MAX_INDEX = 2**63 - 1
"""The largest index or size a store's integer column holds."""


def _whole(value: object, what: str) -> int:
    """``value`` as an index or size given by a caller, by the Merkle checks' rule
    (``merkle.tree_integer``: an ``int``, a subclass or a numpy integer), a bool refused, else
    ``InputError`` naming ``what``; one beyond what a store can hold is past any log's end
    (``BeyondLogEnd`` follows from the caller's check), never an overflow in the driver. Until
    review R86c a copy of the rule refused a numpy integer and quoted with ``repr`` (an int
    subclass of 10**5000 made the refusal a bare ``ValueError``, a list nested 100,000 deep a
    ``RecursionError``)."""
    return tree_integer(value, what, "audit log", bools=False)


def _switch(value: object, what: str) -> bool:
    """``value``, a caller's keyword ``what`` that turns a check on or off, when it is a bool;
    ``InputError`` naming ``what`` otherwise: until review R91c ``None`` or ``0`` turned the
    check off without a word."""
    if type(value) is not bool:
        raise InputError(f"audit log: {what} must be True or False, got {quoted(value, 40)}")
    return value
