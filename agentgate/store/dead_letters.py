"""Dead letters: tool calls the scheduler gave up on, with everything needed to look into them.

A dead letter keeps the call (tool, tenant, principal, run and call ids, the argument digest:
never the arguments themselves, which may hold secrets), its authority chain as the caller gave
it (opaque strings, grant hashes say), why the scheduler gave up, and the error of every attempt.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from agentgate._shown import character_named, quoted, shown
from agentgate.errors import InputError, StoreError
from agentgate.store._base import MAX_STORED_INTEGER, Dialect, Store, Transaction, unix_time, whole_number

_TABLES = """
CREATE TABLE IF NOT EXISTS agentgate_dead_letters (
    id TEXT PRIMARY KEY,
    recorded_at {real} NOT NULL,
    tool TEXT NOT NULL,
    tenant TEXT NOT NULL,
    principal TEXT NOT NULL,
    run_id TEXT,
    call_id TEXT,
    idempotency_key TEXT,
    arguments_digest TEXT NOT NULL,
    authority_chain TEXT NOT NULL,
    reason TEXT NOT NULL,
    errors TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agentgate_dead_letters_time ON agentgate_dead_letters (recorded_at);
"""

SCHEMA: dict[Dialect, str] = {
    "sqlite": _TABLES.format(real="REAL"),
    "postgresql": _TABLES.format(real="DOUBLE PRECISION"),
}

_ID_CHARS = 256
"""The longest dead letter id (characters) ``record`` keeps. The scheduler's are 32 hexadecimal
digits; the id is the table's key, and a PostgreSQL B-tree index entry holds about 2.7 KB, 256
characters at most 1 KB of UTF-8 (a NUL written ``\\x00`` included), where SQLite has no bound:
until review R88 SQLite kept a letter of a 4,000-character id and PostgreSQL refused it with a
``StoreError`` (as the ledger's grant ids were bounded in review R87)."""

_COLUMNS = (
    "id, recorded_at, tool, tenant, principal, run_id, call_id, idempotency_key, arguments_digest, "
    "authority_chain, reason, errors"
)


@dataclass(frozen=True)
class AttemptError:
    """The failure of one attempt."""

    attempt: int
    error_class: str
    error_type: str
    message: str
    at: float


@dataclass(frozen=True)
class DeadLetter:
    """A call the scheduler gave up on. ``reason`` is the rule that stopped it (docs/tasks.md)."""

    id: str
    recorded_at: float
    tool: str
    tenant: str
    principal: str
    run_id: str | None
    call_id: str | None
    idempotency_key: str | None
    arguments_digest: str
    authority_chain: tuple[str, ...]
    reason: str
    errors: tuple[AttemptError, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``agentgate tasks dead-letters --json`` prints per letter)."""
        data = asdict(self)
        data["authority_chain"] = list(self.authority_chain)
        data["errors"] = [asdict(e) for e in self.errors]
        return data


class DeadLetterStore:
    """Dead letters in the store (SQLite or PostgreSQL)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("dead_letters", SCHEMA)

    def record(self, letter: DeadLetter) -> None:
        """Persist ``letter``; raises ``StoreError`` if the store refuses it.

        A NUL character in its text (a tool call id a model made, a run id) is recorded as
        ``\\x00``, on both stores: PostgreSQL's text columns cannot hold it, and the whole letter
        was refused there while SQLite kept it.

        Raises ``InputError``, nothing written, for a ``recorded_at`` that is not a finite number
        of Unix seconds (``unix_time``; a bool is none): until review R85 NaN was a ``StoreError``
        on SQLite (stored as NULL) and stored on PostgreSQL, where no prune ever forgot it (nor
        infinity), and text was stored on SQLite, where every listing then failed on the row.
        Raises ``InputError`` naming the field, nothing written, for any other field that is not
        of its type (text, or None where the field may be; ``authority_chain`` a tuple or list of
        text; ``errors`` of ``AttemptError`` as the scheduler makes them): until review R88 a
        ``tool`` of 5 or an ``id`` of bytes was a bare ``TypeError``, and an ``authority_chain``
        of ``"g1g2"`` was stored as the chain ``("g", "1", "g", "2")``; an error's ``attempt``
        that is no attempt number from 1 to 2**63 - 1 (what the stores' integers hold), or a text field that is not valid Unicode (a lone
        surrogate), names its field too (until review R88 a bare ``ValueError`` out of JSON, and
        a ``StoreError`` naming no field). And for an ``id`` longer than ``_ID_CHARS`` characters,
        on both stores."""
        recorded_at = unix_time(letter.recorded_at, f"the recorded_at of dead letter {quoted(letter.id, 60)}")
        _refuse_wrong_types(letter)
        errors = json.dumps([asdict(e) for e in letter.errors], separators=(",", ":"))
        with self.store.transaction() as tx:
            tx.execute(
                f"INSERT INTO agentgate_dead_letters ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    _storable(letter.id),
                    recorded_at,
                    _storable(letter.tool),
                    _storable(letter.tenant),
                    _storable(letter.principal),
                    _storable(letter.run_id),
                    _storable(letter.call_id),
                    _storable(letter.idempotency_key),
                    _storable(letter.arguments_digest),
                    json.dumps(list(letter.authority_chain)),
                    _storable(letter.reason),
                    errors,
                ),
            )

    def recent(self, *, limit: int = 100, tool: str | None = None) -> list[DeadLetter]:
        """The newest ``limit`` dead letters (of ``tool`` when given, compared as ``record``
        stores it), newest first.

        Raises ``InputError`` for a ``limit`` that is not a whole number from 1 to 2**63 - 1 (a
        bool neither), on both stores: until review R57, SQLite read ``-1`` as no limit and
        PostgreSQL refused it with a ``StoreError``. Raises ``InputError`` for a ``tool`` that is
        not a string or None: until review R84, ``5`` was a bare ``TypeError`` and ``["a"]`` a
        ``StoreError`` about binding a parameter; and for an empty ``tool``, which names no tool
        (as ``agentgate tasks dead-letters --tool ""`` is refused): until review R85 it was read
        as no filter, and every tool's letters were listed."""
        whole_number(limit, "the dead letters' limit", 1)
        if tool is not None and not isinstance(tool, str):
            raise InputError(
                f"the dead letters' tool must be a tool's name (text) or None, got {type(tool).__name__}"
            )
        if tool == "":
            raise InputError("the dead letters' tool must be a tool's name or None, got an empty name")
        where, params = ("WHERE tool = ? ", [_storable(tool)]) if tool is not None else ("", [])
        rows = self.store.query(
            f"SELECT {_COLUMNS} FROM agentgate_dead_letters {where}ORDER BY recorded_at DESC, id LIMIT ?",
            (*params, limit),
        )
        return [_letter(row) for row in rows]

    def prune(self, before: float, *, tx: Transaction | None = None) -> int:
        """Forget the dead letters recorded before ``before`` (Unix seconds); returns how many.
        In ``tx`` when given (``agentgate store prune`` prunes every part in one), else in a
        transaction of its own.

        Raises ``InputError`` for a ``before`` that is not a finite number (``unix_time``): until
        review R57, NaN forgot every letter on PostgreSQL and none on SQLite."""
        cut = unix_time(before, "the dead letters' prune time")
        with self.store.within(tx) as work:
            work.execute("DELETE FROM agentgate_dead_letters WHERE recorded_at < ?", (cut,))
            return work.rowcount


def _refuse_wrong_types(letter: DeadLetter) -> None:
    """``InputError`` naming the first field of ``letter`` that ``record`` cannot store as
    ``recent`` reads it back (``_letter``), and what it got."""
    named = f"dead letter {quoted(letter.id, 60)}"
    for _, field in _TEXT_FIELDS:
        value = getattr(letter, field)
        if not isinstance(value, str):
            raise InputError(f"the {field} of {named} must be text, got {shown(value)}")
    if len(letter.id) > _ID_CHARS:
        raise InputError(f"the id of {named} must be at most {_ID_CHARS} characters, got {len(letter.id):,}")
    for _, field in _OPTIONAL_TEXT_FIELDS:
        value = getattr(letter, field)
        if value is not None and not isinstance(value, str):
            raise InputError(f"the {field} of {named} must be text or None, got {shown(value)}")
    chain = letter.authority_chain
    if not isinstance(chain, tuple | list):
        raise InputError(
            f"the authority_chain of {named} must be a tuple of grant ids (text), got {shown(chain)}"
        )
    for number, link in enumerate(chain):
        if not isinstance(link, str):
            raise InputError(
                f"the authority_chain of {named} must be a tuple of grant ids (text), got {shown(link)} "
                f"at position {number}"
            )
    errors = letter.errors
    if not isinstance(errors, tuple | list):
        raise InputError(f"the errors of {named} must be a tuple of AttemptError, got {shown(errors)}")
    for number, error in enumerate(errors):
        if not isinstance(error, AttemptError):
            got = shown(error)
        elif (wrong := _wrong_attempt_field(asdict(error), writing=True)) is not None:
            got = f"an AttemptError whose {wrong} is {shown(getattr(error, wrong))}"
        else:
            continue
        raise InputError(
            f"the errors of {named} must be a tuple of AttemptError (an int attempt from 1 to "
            f"2**63 - 1, text class, type and message, a time at), got {got} at position {number}"
        )
    for field in (*(f for _, f in _TEXT_FIELDS), *(f for _, f in _OPTIONAL_TEXT_FIELDS)):
        value = getattr(letter, field)
        position = _not_unicode_at(value) if value is not None else None
        if position is not None:
            # the character named, never the text quoted: an idempotency key may be a secret
            raise InputError(
                f"the {field} of {named} must be valid Unicode text: it holds "
                f"{character_named(value[position])} at character {position + 1}; no store can hold it"
            )


def _not_unicode_at(text: str) -> int | None:
    """Where ``text`` holds its first character that is not valid Unicode (a lone surrogate, from
    a name decoded with ``surrogateescape``), or ``None``: until review R88 such a field was a
    ``StoreError`` about "a text value", naming none, instead of an ``InputError`` naming it."""
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _storable(text: str | None) -> str | None:
    """``text`` as a dead letter keeps it: a NUL character written ``\\x00`` (as a revocation's
    reason is), the same on SQLite and PostgreSQL."""
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\\x00")


def _letter(row: tuple[Any, ...]) -> DeadLetter:
    """A dead letter as read; ``StoreError`` naming the letter and the field when a value is not
    what ``record`` writes (a row edited by hand, or by another program: it is corrupt). Read as
    before, ``agentgate tasks dead-letters`` ended in a ``ValueError``, ``JSONDecodeError`` or
    ``TypeError`` traceback at such a row."""
    letter_id = row[0]
    for number, field in _TEXT_FIELDS:
        if not isinstance(row[number], str):
            _corrupt(letter_id, field, row[number])
    for number, field in _OPTIONAL_TEXT_FIELDS:
        if row[number] is not None and not isinstance(row[number], str):
            _corrupt(letter_id, field, row[number])
    if isinstance(row[1], bool) or not isinstance(row[1], int | float):
        _corrupt(letter_id, "recorded_at", row[1])
    chain = _loaded(letter_id, "authority_chain", row[9])
    if not isinstance(chain, list) or not all(isinstance(link, str) for link in chain):
        _corrupt(letter_id, "authority_chain", row[9])
    errors = _loaded(letter_id, "errors", row[11])
    if not isinstance(errors, list) or not all(_attempt_error(error) for error in errors):
        _corrupt(letter_id, "errors", row[11])
    return DeadLetter(
        id=row[0],
        recorded_at=float(row[1]),
        tool=row[2],
        tenant=row[3],
        principal=row[4],
        run_id=row[5],
        call_id=row[6],
        idempotency_key=row[7],
        arguments_digest=row[8],
        authority_chain=tuple(chain),
        reason=row[10],
        errors=tuple(AttemptError(**e) for e in errors),
    )


_TEXT_FIELDS = (
    (0, "id"),
    (2, "tool"),
    (3, "tenant"),
    (4, "principal"),
    (8, "arguments_digest"),
    (10, "reason"),
)
_OPTIONAL_TEXT_FIELDS = ((5, "run_id"), (6, "call_id"), (7, "idempotency_key"))
_ATTEMPT_ERROR_FIELDS = {
    "attempt": int,
    "error_class": str,
    "error_type": str,
    "message": str,
    "at": int | float,
}


def _attempt_error(value: object) -> bool:
    """Whether ``value`` is an ``AttemptError`` as ``record`` writes it: its fields, of their types
    (``_wrong_attempt_field``)."""
    return (
        isinstance(value, dict)
        and value.keys() == _ATTEMPT_ERROR_FIELDS.keys()
        and _wrong_attempt_field(value, writing=False) is None
    )


def _wrong_attempt_field(value: dict[str, Any], *, writing: bool) -> str | None:
    """The first field of the ``AttemptError`` ``value`` (its fields by name) that is not of its
    type, or ``None``: ``at`` a time a float holds (an integer of 400 digits is none: until review
    R84 an ``OverflowError`` traceback out of ``agentgate tasks dead-letters``), ``attempt`` an int.
    ``writing`` (``record``), the ``attempt`` is also an attempt's number as the scheduler counts
    them, from 1 to ``MAX_STORED_INTEGER`` (2**63 - 1): until review R88 one of 5,000 digits, which
    JSON cannot write, was a bare ``ValueError`` out of ``record``. Reading, any int is one, as
    ``record`` wrote before that bound: a letter of attempt 2**63 is no corrupt row (review R88's
    third regression pass; the bound on the read had made ``recent`` refuse such a letter)."""
    for name, kind in _ATTEMPT_ERROR_FIELDS.items():
        if not isinstance(value[name], kind) or isinstance(value[name], bool):
            return name
    if writing and not 1 <= value["attempt"] <= MAX_STORED_INTEGER:
        return "attempt"
    if isinstance(value["at"], int) and abs(value["at"]) > sys.float_info.max:
        return "at"
    return None


def _loaded(letter_id: object, field: str, text: object) -> Any:
    """The JSON value ``text`` holds; ``StoreError`` when it holds none, or JSON nested past the
    parser's depth (until review R83 a ``RecursionError`` traceback out of ``agentgate tasks
    dead-letters``)."""
    if not isinstance(text, str):
        _corrupt(letter_id, field, text)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        _corrupt(letter_id, field, text)


def _corrupt(letter_id: object, field: str, value: object) -> NoReturn:
    """``StoreError`` for a stored ``field`` that ``record`` does not write, the letter's id and the
    value quoted as ``quoted`` does (an id edited to 1 MB is not written whole)."""
    raise StoreError(
        f"dead letter {quoted(letter_id, 60)}: the stored {field} {quoted(value)} is not what a scheduler "
        "writes (a corrupt row)"
    )
