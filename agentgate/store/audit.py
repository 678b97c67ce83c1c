"""The audit log's tables and the ``AuditLog``: append, checkpoint, verify, prove.

Tables (DDL per dialect below):

- ``audit_log(idx, entry, leaf_hash)``: one row per entry, ``idx`` from 0 without gaps, the
  entry's canonical bytes and their RFC 9162 leaf hash. Triggers refuse UPDATE, DELETE (and on
  PostgreSQL TRUNCATE), and any INSERT whose ``idx`` is not the next one.
- ``audit_checkpoints(id, size, root, note, created)``: signed checkpoints, append-only too.
- ``audit_refs(idx, ref)`` (kept by a trigger on ``audit_log``) and ``audit_nodes(level,
  position, hash)`` (a cache of block roots): lookup aids for ``explain`` and ``prove``, covered
  by no signature, so everything read through them is proven against a signed checkpoint.

Appends are serialized so that indexes have no gaps: SQLite's write lock (the store's
transactions are ``BEGIN IMMEDIATE``) does it on SQLite, a transaction-scoped advisory lock on
PostgreSQL. ``append`` runs inside the caller's transaction when given one, so that a decision's
entry and its budget change commit together, or neither does (log before allow).

The log key signs checkpoints. ``open_log_key`` finds it: the file named by ``AGENTGATE_LOG_KEY``,
else ``log.key`` next to the SQLite database (``.agentgate/log.key`` in the working directory for
PostgreSQL), created with mode 0600 on first use (only for a log without checkpoints, or while
rotating the key); ``log.pub`` beside it holds the public key.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import operator
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from agentgate.audit.entry import (
    DEFAULT_MAX_ENTRY_BYTES,
    MAX_MAX_ENTRY_BYTES,
    MIN_MAX_ENTRY_BYTES,
    AuditEntry,
    encode_bounded,
    encode_entry,
    one_line,
    utc_now,
)
from agentgate.audit.merkle import (
    RootAccumulator,
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    verify_inclusion,
)
from agentgate.audit.note import Checkpoint, open_checkpoint, sign_checkpoint
from agentgate.audit.proof import ProofBundle
from agentgate.errors import AuditError, BeyondLogEnd, InputError, KeyFileError, StoreError, TamperDetected
from agentgate.keys import PublicKey, SigningKey, load_public_key, load_signing_key, refuse_key_text, save_key
from agentgate.store._base import Dialect, Row, Store, Transaction, env_setting, loaded_driver_errors
from agentgate.store._sqlite import SQLiteStore

DEFAULT_ORIGIN = "agentgate.local/audit"
_sha256 = hashlib.sha256
_BATCH = 20_000
"""The most rows one read of the log fetches."""
_BATCH_BYTES = 16 << 20
"""About how many bytes of entries one read of the log fetches (memory while reading a log)."""
_FIRST_BATCH = 16
"""Rows in the first read, before the entries' size is known."""
_ROW_BYTES = 300
"""What a row costs besides its entry's bytes (index, leaf hash, Python objects), for sizing."""
_CHECKPOINT_BATCH = 1_000
"""Checkpoint rows one read fetches."""
_NODE_LEVEL = 10
"""Height of the cached subtree roots (``audit_nodes``): blocks of 1024 leaf hashes."""
_INSERT = "INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)"
_REF_KEY = b',"ref":'
"""The top-level ``ref`` key of an entry's bytes: its last occurrence (``args`` and ``reasons`` come
before it, and the keys after it hold no objects; a string holds no unescaped quote)."""
_NO_REF = b'null,"resource":'
_REF_NEEDLE = b',"ref":%d,"resource":'
"""What an entry holds at its last ``,"ref":`` when its reference is the number formatted in."""
_MAX_REF = 10**18
"""References the index holds: 1 to 18 digits (what PostgreSQL's trigger reads; no real log nears it)."""
APPEND_LOCK = 27416741019937140
"""The PostgreSQL advisory lock that serializes appends (ASCII "agaudit"; the same number is
written in ``agentgate_audit_lock_next`` below)."""

AUDIT_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS audit_log (
    idx INTEGER PRIMARY KEY,
    entry BLOB NOT NULL,
    leaf_hash BLOB NOT NULL CHECK (length(leaf_hash) = 32)
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS audit_log_next_index BEFORE INSERT ON audit_log
WHEN NEW.idx IS NOT (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log)
BEGIN SELECT RAISE(ABORT, 'audit_log: index must be the next one'); END;
CREATE TRIGGER IF NOT EXISTS audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_replace BEFORE INSERT ON audit_checkpoints
WHEN NEW.id IN (SELECT id FROM audit_checkpoints)
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
""",
    "postgresql": """
DO $$
BEGIN
    -- Everything is created only when missing, so that a role that may only SELECT and INSERT
    -- (docs/operations.md, least privilege) can start agentgate on a schema made by the owner.
    IF to_regclass('audit_log') IS NULL THEN
        CREATE TABLE audit_log (
            idx BIGINT PRIMARY KEY,
            entry BYTEA NOT NULL,
            leaf_hash BYTEA NOT NULL CHECK (octet_length(leaf_hash) = 32)
        );
    END IF;
    IF to_regclass('audit_checkpoints') IS NULL THEN
        CREATE TABLE audit_checkpoints (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            size BIGINT NOT NULL,
            root BYTEA NOT NULL,
            note TEXT NOT NULL,
            created TEXT NOT NULL
        );
    END IF;
    IF to_regprocedure('agentgate_append_only()') IS NULL THEN
        CREATE FUNCTION agentgate_append_only() RETURNS trigger LANGUAGE plpgsql AS $fn$
        BEGIN
            RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP;
        END;
        $fn$;
    END IF;
    IF to_regprocedure('agentgate_audit_lock_next()') IS NULL THEN
        -- One round trip: take the append lock (held to the end of the transaction), then read
        -- the next index with a fresh snapshot (a volatile function's queries each take one).
        CREATE FUNCTION agentgate_audit_lock_next() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
        BEGIN
            PERFORM pg_advisory_xact_lock(27416741019937140);  -- APPEND_LOCK, ASCII "agaudit"
            RETURN (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log);
        END;
        $fn$;
    END IF;
    IF to_regprocedure('agentgate_audit_next_index()') IS NULL THEN
        CREATE FUNCTION agentgate_audit_next_index() RETURNS trigger LANGUAGE plpgsql AS $fn$
        BEGIN
            IF NEW.idx IS DISTINCT FROM (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log) THEN
                RAISE EXCEPTION 'audit_log: index % is not the next one', NEW.idx;
            END IF;
            RETURN NEW;
        END;
        $fn$;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'audit_log'::regclass
                   AND tgname = 'audit_log_next_index') THEN
        CREATE TRIGGER audit_log_next_index BEFORE INSERT ON audit_log
            FOR EACH ROW EXECUTE FUNCTION agentgate_audit_next_index();
        CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
            FOR EACH ROW EXECUTE FUNCTION agentgate_append_only();
        CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
            FOR EACH STATEMENT EXECUTE FUNCTION agentgate_append_only();
        CREATE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE ON audit_checkpoints
            FOR EACH ROW EXECUTE FUNCTION agentgate_append_only();
        CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
            FOR EACH STATEMENT EXECUTE FUNCTION agentgate_append_only();
    END IF;
END;
$$;
""",
}

REFS_DDL: dict[Dialect, str] = {
    # ``audit_refs(idx, ref)``: for each entry that refers to another (an outcome to its allow,
    # an approval to its request), its index and that reference, kept by a trigger on audit_log
    # so that every writer (whatever its version or its database role) keeps it complete.
    # A lookup aid only, covered by no signature: ``AuditLog.explain`` re-reads and proves every
    # entry it finds through it. ``audit_refs_built`` holds one row once existing entries were
    # indexed (``AuditLog`` does that the first time it opens a log without it).
    # ``audit_nodes(level, position, hash)``: a cache of the roots of aligned blocks of
    # ``2**_NODE_LEVEL`` leaf hashes, filled by ``explain``; proofs built from it are checked
    # against the signed root, and rebuilt from the leaf hashes if they do not match.
    "sqlite": """
CREATE TABLE IF NOT EXISTS audit_refs (
    idx INTEGER PRIMARY KEY,
    ref INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_refs_by_ref ON audit_refs (ref);
CREATE TABLE IF NOT EXISTS audit_refs_built (built INTEGER PRIMARY KEY CHECK (built = 1));
CREATE TABLE IF NOT EXISTS audit_nodes (
    level INTEGER NOT NULL,
    position INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, position)
);
CREATE TRIGGER IF NOT EXISTS audit_log_index_ref AFTER INSERT ON audit_log
WHEN json_valid(CAST(NEW.entry AS TEXT)) AND json_type(CAST(NEW.entry AS TEXT), '$.ref') = 'integer'
BEGIN
    INSERT OR REPLACE INTO audit_refs (idx, ref)
    VALUES (NEW.idx, json_extract(CAST(NEW.entry AS TEXT), '$.ref'));
END;
""",
    # PostgreSQL 15 has no error-free JSON test (and parsing costs), so the trigger reads the
    # reference from the canonical bytes as text: the top-level ``,"ref":`` is the last one (args
    # may hold the same text, but the keys after ``ref`` hold no objects, and a string cannot
    # hold an unescaped quote), found from the end; a number and ``,"resource":`` must follow. SECURITY DEFINER: a
    # role that may only insert into audit_log still keeps the index.
    "postgresql": """
CREATE TABLE IF NOT EXISTS audit_refs (
    idx BIGINT PRIMARY KEY,
    ref BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_refs_by_ref ON audit_refs (ref);
CREATE TABLE IF NOT EXISTS audit_refs_built (
    built INTEGER PRIMARY KEY CHECK (built = 1)
);
CREATE TABLE IF NOT EXISTS audit_nodes (
    level INTEGER NOT NULL,
    position BIGINT NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (level, position)
);
DO $$
DECLARE
    -- The schema of the audit_refs this process's statements use: what the function must write.
    home text := (SELECT nspname FROM pg_class JOIN pg_namespace ON pg_namespace.oid = relnamespace
                  WHERE pg_class.oid = 'audit_refs'::regclass);
BEGIN
    -- Made when missing, and remade by its owner when an earlier version made it with the body
    -- before 2026-11-30 04:00 (commit 0626663: a backtracking regex, about 50 us per append
    -- against 18 us; the same rows). This body is the one that looks for ':"fer",'.
    IF to_regprocedure('agentgate_audit_index_ref()') IS NULL
       OR EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('agentgate_audit_index_ref()')
                  AND pg_has_role(proowner, 'USAGE') AND position(':"fer",' IN prosrc) = 0) THEN
        CREATE OR REPLACE FUNCTION agentgate_audit_index_ref() RETURNS trigger LANGUAGE plpgsql
        SECURITY DEFINER SET search_path FROM CURRENT AS $fn$
        DECLARE
            t text := encode(NEW.entry, 'escape');
            p integer := position(':"fer",' IN reverse(t));  -- the last ,"ref": from the end
            found text;
        BEGIN
            IF p > 0 THEN
                found := substring(right(t, p - 1) FROM '^([0-9]{1,18}),"resource":');
                IF found IS NOT NULL THEN
                    INSERT INTO audit_refs (idx, ref) VALUES (NEW.idx, found::bigint)
                    ON CONFLICT (idx) DO UPDATE SET ref = EXCLUDED.ref;
                END IF;
            END IF;
            RETURN NULL;
        END;
        $fn$;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'audit_log'::regclass
                   AND tgname = 'audit_log_index_ref') THEN
        CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log
            FOR EACH ROW EXECUTE FUNCTION agentgate_audit_index_ref();
    END IF;
    -- It runs as its owner, so its search path names pg_temp last: first (where PostgreSQL puts
    -- it unless named), a caller's temporary table called audit_refs, with a trigger of the
    -- caller's, would run the caller's code as the owner. Set by its owner (functions made by
    -- an earlier version are fixed when the owner opens the log).
    IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = 'agentgate_audit_index_ref()'::regprocedure
               AND pg_has_role(proowner, 'USAGE')
               AND proconfig IS DISTINCT FROM ARRAY['search_path=pg_catalog, ' || quote_ident(home) || ', pg_temp']) THEN
        EXECUTE format('ALTER FUNCTION agentgate_audit_index_ref() SET search_path = pg_catalog, %I, pg_temp', home);
    END IF;
END;
$$;
""",
}
_BACKFILL: dict[Dialect, str] = {
    "sqlite": "INSERT OR IGNORE INTO audit_refs (idx, ref) "
    "SELECT idx, json_extract(CAST(entry AS TEXT), '$.ref') FROM audit_log "
    "WHERE json_valid(CAST(entry AS TEXT)) AND json_type(CAST(entry AS TEXT), '$.ref') = 'integer'",
    "postgresql": "INSERT INTO audit_refs (idx, ref) SELECT idx, found::bigint FROM ("
    "SELECT idx, CASE WHEN p > 0 THEN substring(right(t, p - 1) FROM '^([0-9]{1,18}),\"resource\":') END "
    "AS found FROM (SELECT idx, t, position(':\"fer\",' IN reverse(t)) AS p FROM ("
    "SELECT idx, encode(entry, 'escape') AS t FROM audit_log) AS texts) AS found_at) AS refs "
    "WHERE found IS NOT NULL ON CONFLICT (idx) DO NOTHING",
}


def log_origin() -> str:
    """The log's origin: ``AGENTGATE_LOG_ORIGIN``, else ``agentgate.local/audit``."""
    return os.environ.get("AGENTGATE_LOG_ORIGIN") or DEFAULT_ORIGIN


def entry_limit(configured: int | None = None) -> int:
    """The bound on one entry's bytes: ``configured``, else ``AGENTGATE_AUDIT_MAX_ENTRY_BYTES``,
    else ``DEFAULT_MAX_ENTRY_BYTES``. Raises ``InputError``, naming where the value came from, when
    it is not a whole number from ``MIN_MAX_ENTRY_BYTES`` to ``MAX_MAX_ENTRY_BYTES``."""
    source = "audit entry limit" if configured is not None else "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"
    if configured is None:
        configured = env_setting(source, int, DEFAULT_MAX_ENTRY_BYTES, "a whole number of bytes")
    if type(configured) is not int or not MIN_MAX_ENTRY_BYTES <= configured <= MAX_MAX_ENTRY_BYTES:
        raise InputError(
            f"{source} must be from {MIN_MAX_ENTRY_BYTES} to {MAX_MAX_ENTRY_BYTES} bytes, "
            f"got {str(configured)[:80]}"
        )
    return configured


def _previous_specs() -> list[str]:
    """What ``AGENTGATE_LOG_PREVIOUS_KEYS`` names: its comma-separated parts that are not blank."""
    return [
        spec.strip() for spec in os.environ.get("AGENTGATE_LOG_PREVIOUS_KEYS", "").split(",") if spec.strip()
    ]


def previous_log_keys() -> list[PublicKey]:
    """Public keys of rotated-out log keys: ``AGENTGATE_LOG_PREVIOUS_KEYS``, comma-separated files or dids."""
    keys = []
    for spec in _previous_specs():
        try:
            keys.append(load_public_key(spec))
        except KeyFileError as exc:
            raise KeyFileError(f"AGENTGATE_LOG_PREVIOUS_KEYS: {exc}") from exc
    return keys


def log_key_path(store: Store) -> Path:
    """Where the log key lives for ``store`` (see the module docstring)."""
    configured = os.environ.get("AGENTGATE_LOG_KEY")
    if configured:
        refuse_key_text(configured, "AGENTGATE_LOG_KEY")
    if configured and configured != configured.strip():
        # A leading space makes the path relative (a key made under ``./ /...``); a trailing
        # ``\r`` (an env file saved with CRLF endings) names a file beside the real one.
        raise KeyFileError(
            f"AGENTGATE_LOG_KEY={configured!r} begins or ends with white space or a line break: remove it"
        )
    if configured:
        return Path(configured)
    if isinstance(store, SQLiteStore):
        return store.path.parent / "log.key"
    return Path(".agentgate") / "log.key"


def open_log_key(store: Store, *, create: bool = True) -> SigningKey:
    """The log's signing key, created (0600, with ``log.pub`` beside it) on first use if ``create``.

    A key is created only for a log that has no checkpoint yet, or while the key is being rotated
    (``AGENTGATE_LOG_PREVIOUS_KEYS`` set): checkpoints signed by a key that is not where this
    process looks (another working directory, an unset ``AGENTGATE_LOG_KEY``) mean the key is
    missing, not that a new one is wanted. Raises ``KeyFileError`` when the file is unreadable, too
    widely readable, or missing and ``create`` is false or no key may be created.
    """
    path = log_key_path(store)
    if not create or (path.exists() and not _left_half_made(path, store)):
        return load_signing_key(path)
    if path.suffix != ".key":
        raise KeyFileError(f"{path}: AGENTGATE_LOG_KEY must name a file ending in .key")
    if not _previous_specs() and _has_checkpoints(store):
        raise KeyFileError(
            f"{path}: no log key there, but this audit log has checkpoints signed by one; point "
            "AGENTGATE_LOG_KEY at it (to rotate the key, list the old public key in "
            "AGENTGATE_LOG_PREVIOUS_KEYS first). No key was created."
        )
    try:
        save_key(SigningKey.generate(), path.parent, path.stem)
    except KeyFileError:
        if not path.exists():
            raise
    return load_signing_key(path)  # another process may have won the race: use its key


def _left_half_made(path: Path, store: Store) -> bool:
    """Whether ``path`` is a log key that a process killed while creating it left without its
    ``.pub`` (``save_key`` was stopped between its two links), and a key may be made instead.

    Such a key is still linked to a temporary file of ``save_key``, and the next ``save_key`` in
    its directory (``agentgate keys new --dir`` there) removes it: signing checkpoints with it
    would lose the log key later. ``save_key`` then takes it away and makes a whole pair. A key
    without ``.pub`` that is linked nowhere else (one installed by hand, a mounted secret) is the
    log key, and so is such a key on a log with checkpoints (a version without this check may
    have signed them with it).
    """
    try:
        if path.stat().st_nlink < 2 or path.with_suffix(".pub").exists():
            return False
    except OSError:
        return False
    return bool(_previous_specs()) or not _has_checkpoints(store)


def _has_checkpoints(store: Store) -> bool:
    """Whether ``store`` holds an audit log with at least one checkpoint."""
    try:
        return bool(store.query("SELECT 1 FROM audit_checkpoints LIMIT 1"))
    except loaded_driver_errors(StoreError):
        return False  # no audit tables yet


@dataclass(frozen=True)
class VerifyReport:
    """What ``AuditLog.verify`` found. ``ok`` is true only if nothing at all is wrong."""

    size: int
    """Entries in the log."""
    root: bytes
    """Merkle root recomputed from the entries' bytes."""
    checkpoints_checked: int
    """Stored checkpoints whose signature and root were checked."""
    first_bad_index: int | None = None
    """The smallest index implicated by a problem, when one can be named."""
    problems: tuple[str, ...] = field(default_factory=tuple)
    """Each thing that is wrong, in the order found."""

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Explanation:
    """What ``AuditLog.explain`` found for one entry, every entry in it proven or listed unproven."""

    entry: AuditEntry
    """The entry asked for."""
    related: tuple[AuditEntry, ...]
    """The entries that refer to it and the one it refers to, in index order."""
    checkpoint: Checkpoint | None
    """The latest stored checkpoint (signature checked) the entries were proven against, if any."""
    unproven: tuple[int, ...]
    """Indexes shown that the checkpoint does not cover yet (appended after it)."""
    indexed: bool
    """Whether the related entries were found through the reference index (else a full scan)."""


def _wrap(exc: Exception, what: str) -> AuditError:
    return AuditError(f"audit log: {what} failed: {exc}")


def _note(value: object) -> str:
    """A stored signed note as text. SQLite's rows are read as bytes (a TEXT column can hold bytes
    that are not UTF-8, which sqlite3 cannot even return): such bytes read with replacement
    characters, a note whose signature then fails instead of an error that stops ``verify``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _bytes(value: object) -> bytes:
    """A stored entry, leaf hash or root as bytes; a NULL (only in a tampered table) as empty."""
    return b"" if value is None else bytes(value)  # type: ignore[call-overload]


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
    """``value`` as an index or size given by a caller: an ``int`` (not a bool), else ``InputError``
    naming ``what``; one beyond what a store can hold is past any log's end (``BeyondLogEnd``
    follows from the caller's check), never an overflow in the driver."""
    if type(value) is not int:
        raise InputError(f"audit log: {what} must be a whole number, got {value!r:.40}")
    return value


def _pick(values: Sequence[Any], positions: Sequence[int]) -> Sequence[Any]:
    """``values`` at ``positions``, in that order (one C-level call for many)."""
    if len(positions) < 2:
        return [values[k] for k in positions]
    return cast(tuple[Any, ...], operator.itemgetter(*positions)(values))


def _execute(tx: Transaction, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    try:
        return tx.execute(sql, params)
    except loaded_driver_errors() as exc:
        raise _wrap(exc, "a statement") from exc


def create_audit_tables(store: Store) -> bool:
    """Create the audit log's tables (``AUDIT_DDL``) and its reference index (``REFS_DDL``), and
    index the entries written before the index, once. Returns whether the index is complete.

    A role that may not create or fill the index (an owner has not opened the log since the
    upgrade) gets ``False``, and ``explain`` scans instead. Raises ``StoreError`` when the audit
    tables themselves cannot be created.
    """
    store.ensure_schema("audit", AUDIT_DDL)
    try:
        store.ensure_schema("audit_refs", REFS_DDL)
        if store.query("SELECT 1 FROM audit_refs_built"):
            return True
        with store.transaction() as tx:
            # Every append from now on fires the trigger; this indexes those before it.
            tx.execute(_BACKFILL[store.dialect])
            tx.execute("INSERT INTO audit_refs_built (built) VALUES (1) ON CONFLICT DO NOTHING")
    except loaded_driver_errors(StoreError):
        return False
    return True


_CHANGED_WITH_LEAF_HASH = "was changed together with its leaf hash"


class AuditLog:
    """The append-only, signed Merkle audit log kept in ``store``."""

    def __init__(
        self,
        store: Store,
        signer: SigningKey | PublicKey,
        origin: str = DEFAULT_ORIGIN,
        *,
        previous_keys: Sequence[PublicKey] = (),
        max_entry_bytes: int | None = None,
    ) -> None:
        """The log in ``store``, signing new checkpoints with ``signer``.

        ``max_entry_bytes`` bounds each new entry (default ``AGENTGATE_AUDIT_MAX_ENTRY_BYTES``,
        else 64 KiB; at least 4096): larger values are recorded by digest (``encode_bounded``).
        Raises ``InputError`` for a bound below 4096 or one that is not a whole number.

        ``previous_keys`` are the public keys of log keys rotated out: checkpoints they signed
        still verify; new checkpoints are signed only with ``signer``. Given the log key's public
        key only (an auditor's copy), the log reads, verifies and proves against stored
        checkpoints, and ``checkpoint`` raises ``AuditError`` when it would have to sign.
        """
        self.max_entry_bytes = entry_limit(max_entry_bytes)
        self.store = store
        self.signer: SigningKey | None = signer if isinstance(signer, SigningKey) else None
        self._public = signer.public if isinstance(signer, SigningKey) else signer
        self.origin = origin
        self.previous_keys = tuple(previous_keys)
        Checkpoint(origin, 0, bytes(32)).text()  # validates the origin now, not at the first checkpoint
        self.refs_indexed = create_audit_tables(store)
        """Whether ``audit_refs`` indexes every entry's reference (else ``explain`` scans the log)."""
        # Appends guess the next index only where the next-index trigger is known to guard them.
        self._guessing = store.dialect == "sqlite" and bool(
            store.query(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'audit_log_next_index'"
            )
        )
        self._guess: int | None = None
        # Entries, leaf hashes and roots are read as bytes whatever type the row holds: SQLite
        # stores what it is given, and an entry rewritten with replace() comes back as TEXT.
        # (PostgreSQL's BYTEA columns hold nothing else.)
        blob = "CAST({} AS BLOB)" if store.dialect == "sqlite" else "{}"
        self._entry, self._leaf, self._root, self._hash, self._note = (
            blob.format(c) for c in ("entry", "leaf_hash", "root", "hash", "note")
        )
        self._empty = "x''" if store.dialect == "sqlite" else "''::bytea"

    def open_checkpoint(self, note: str) -> Checkpoint:
        """A checkpoint of this log signed by its key or a previous one; ``TamperDetected`` otherwise."""
        try:
            return open_checkpoint(note, self.public_key, self.origin)
        except TamperDetected:
            for key in self.previous_keys:
                try:
                    return open_checkpoint(note, key, self.origin)
                except TamperDetected:
                    continue
            raise

    def _signs(self, note: str) -> bool:
        """Whether ``note`` is signed by this log's own key (not only by a previous one)."""
        try:
            open_checkpoint(note, self.public_key, self.origin)
        except TamperDetected:
            return False
        return True

    @property
    def public_key(self) -> PublicKey:
        """The public key of the log key: what checkpoints must be signed with."""
        return self._public

    # --- writing ------------------------------------------------------------------------------

    def lock(self, tx: Transaction) -> None:
        """Take the append lock now, held to the end of ``tx``.

        A writer whose transaction also changes budget, quota or nonce rows takes it first, so
        that every writer takes its locks in one order (the append lock, then rows) and none can
        deadlock with another that appends after locking rows. PostgreSQL: the advisory lock the
        appends take (``agentgate_audit_lock_next``). SQLite: nothing to do, ``BEGIN IMMEDIATE``
        already took the database's one write lock.
        """
        if self.store.dialect == "postgresql":
            tx.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")

    def append(self, fields: Mapping[str, Any], tx: Transaction | None = None) -> int:
        """Append one entry and return its index.

        ``fields`` are ``AuditEntry`` fields except ``index`` (assigned here) and ``time``
        (defaults to now). With ``tx`` the entry commits with the caller's transaction; without,
        it commits before this returns. Raises ``InputError`` for bad fields and ``AuditError``
        (or ``StoreError``) when the entry cannot be written, in which case nothing was written.
        """
        if tx is None:
            try:
                with self.store.transaction() as own:
                    return self._append(own, fields)
            except StoreError as exc:
                raise AuditError(f"audit log: entry not written: {exc}") from exc
        return self._append(tx, fields)

    def append_many(self, batch: Sequence[Mapping[str, Any]]) -> list[int]:
        """Append several entries in one transaction (group commit); all or none are written."""
        try:
            with self.store.transaction() as tx:
                index = self._next_index(tx)
                rows = [self._row(index + k, fields) for k, fields in enumerate(batch)]
                if rows:
                    tx.executemany("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", rows)
                return [row[0] for row in rows]
        except loaded_driver_errors(StoreError) as exc:
            raise AuditError(f"audit log: entries not written: {exc}") from exc

    def _next_index(self, tx: Transaction) -> int:
        """The next index, with the append lock held until ``tx`` ends (SQLite: its write lock)."""
        if self.store.dialect == "postgresql":
            return int(_execute(tx, "SELECT agentgate_audit_lock_next()")[0][0])
        return int(_execute(tx, "SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log")[0][0])

    def _row(self, index: int, fields: Mapping[str, Any]) -> tuple[int, bytes, bytes]:
        if "index" in fields:
            raise InputError("audit entry field index is assigned by the log, not the caller")
        values = dict(fields)
        values.setdefault("time", utc_now())
        values["index"] = index
        data = encode_bounded(values, self.max_entry_bytes)
        return index, data, leaf_hash(data)

    def _append(self, tx: Transaction, fields: Mapping[str, Any]) -> int:
        guess = self._guess
        if guess is not None:
            # SQLite: the index after this log's last append, without reading it. The
            # audit_log_next_index trigger refuses the row unless it is exactly the next index, and
            # a refused statement leaves the transaction usable, so a stale guess (another
            # connection appended, or a rollback undid an append) costs one retry below, never a
            # gap or a duplicate.
            row = self._row(guess, fields)
            try:
                tx.execute(_INSERT, row)
            except sqlite3.IntegrityError:
                pass
            else:
                self._guess = guess + 1
                return guess
        row = self._row(self._next_index(tx), fields)
        _execute(tx, _INSERT, row)
        if self._guessing:
            self._guess = row[0] + 1
        return row[0]

    def checkpoint(self, saved: str | None = None) -> str:
        """Sign and store a checkpoint of the whole log; returns the signed note.

        Refuses (``TamperDetected``) to sign a log whose prefix no longer matches the latest
        checkpoint, or whose newer entries do not match their stored leaf hashes or do not carry
        their own index (rows swapped), so a tampered log is never laundered by a fresh signature.
        ``saved``, a signed checkpoint of this log kept outside the database (the one ``agentgate
        audit checkpoint --out FILE`` wrote last), must still be a prefix of the log too: a
        database restored from an older copy, or forked from one, is refused, not signed over.
        Reads the log in batches: memory does not grow with its size.
        """
        # size -> (root, what it is): the roots the log must still have at those sizes.
        targets: dict[int, tuple[bytes, str]] = {}
        if saved is not None:
            kept = self.open_checkpoint(saved)
            targets[kept.size] = (kept.root, "the saved checkpoint")
        latest = self._latest_checkpoint_row()
        prev_size = 0
        if latest:
            # What was signed, not the row's unsigned columns, is what the log must still match.
            signed = self.open_checkpoint(_note(latest[2]))
            # The size column as stored: SQLite keeps text or a fraction there if given one.
            if (signed.size, signed.root) != (latest[0], _bytes(latest[1])) or type(latest[0]) is not int:
                raise TamperDetected("audit log: the latest checkpoint row does not match its signed note")
            if targets.get(signed.size, (signed.root, ""))[0] != signed.root:
                raise TamperDetected(
                    f"audit log: the saved checkpoint and the last stored one disagree about size {signed.size}"
                )
            prev_size = signed.size
            targets[signed.size] = (signed.root, "the last checkpoint")
        acc = RootAccumulator()
        pending: list[bytes] = []

        def settle() -> None:
            acc.extend(pending)
            pending.clear()
            if acc.size in targets and acc.root() != targets[acc.size][0]:
                raise TamperDetected(
                    f"audit log: the first {acc.size} entries no longer match {targets[acc.size][1]}"
                )

        settle()  # a checkpoint of the empty log
        for idx, data, stored in self._rows(include_entry_from=prev_size):
            count = acc.size + len(pending)
            if idx != count:
                raise TamperDetected(f"audit log: entry {count} is missing")
            if data is not None and leaf_hash(data) != stored:
                raise TamperDetected(f"audit log: entry {idx} does not match its leaf hash")
            if data is not None:
                carried = _index_of(data)
                if carried is None:  # bytes no agentgate wrote, with a matching leaf hash
                    raise TamperDetected(f"audit log: entry {idx} is not a canonical entry")
                if carried != idx:  # rows swapped or moved, hashes and all
                    raise TamperDetected(f"audit log: entry {idx} does not carry its own index")
            pending.append(stored)
            if count + 1 in targets or len(pending) >= _BATCH:
                settle()
        settle()
        beyond = [size for size in targets if size > acc.size]
        if beyond:
            raise TamperDetected(
                f"audit log: has {acc.size} entries, {targets[min(beyond)][1]} had {min(beyond)} "
                "(entries deleted, or the database restored from an older copy)"
            )
        if latest and acc.size == prev_size and (self.signer is None or self._signs(_note(latest[2]))):
            # Nothing new to sign, and signed by this log's key: a log key rotated out since then
            # gets a checkpoint of the same size under the new key (docs/operations.md, step 4).
            return _note(latest[2])
        if self.signer is None:
            raise AuditError(
                f"audit log: a new checkpoint of {acc.size} entries needs the log's private key "
                "(this log was opened with its public key only)"
            )
        note = sign_checkpoint(Checkpoint(self.origin, acc.size, acc.root()), self.signer)
        with self.store.transaction() as tx:
            _execute(
                tx,
                "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
                (acc.size, acc.root(), note, utc_now()),
            )
        return note

    # --- reading ------------------------------------------------------------------------------

    def size(self) -> int:
        """Entries in the log."""
        return int(self.store.query("SELECT COUNT(*) FROM audit_log")[0][0])

    def entry_bytes(self, index: int) -> bytes:
        """The stored bytes of entry ``index``; raises ``InputError`` if there is none
        (``BeyondLogEnd`` past the end of the log, or when ``index`` is not an ``int``)."""
        return self._stored_row(_whole(index, "entry index"))[0]

    def _stored_row(self, index: int, tx: Transaction | None = None) -> tuple[bytes, bytes]:
        """The stored ``(entry, leaf_hash)`` of entry ``index``; ``BeyondLogEnd`` past the end of
        the log, else ``InputError`` if there is none."""
        rows = self._read_rows([index], tx) if 0 <= index <= _MAX_INDEX else {}
        if index not in rows:
            if index >= self._end():
                raise BeyondLogEnd(index, self.size(), "entry")
            raise InputError(f"audit log has no entry {index}")
        return rows[index]

    def entry(self, index: int, tx: Transaction | None = None) -> AuditEntry:
        """Entry ``index``, parsed (read in ``tx`` when given); ``TamperDetected`` if its bytes
        are not canonical."""
        if tx is None:
            return AuditEntry.from_bytes(self.entry_bytes(index))
        return AuditEntry.from_bytes(self._stored_row(_whole(index, "entry index"), tx)[0])

    def entries_at(self, indexes: Iterable[int]) -> dict[int, AuditEntry]:
        """The entries at ``indexes``, parsed, read in a few statements (500 indexes each), not
        one per entry. ``TamperDetected`` if one's bytes are not canonical, and ``entry``'s error
        for one that is not in the log."""
        wanted = sorted(set(indexes))
        read = self._read_rows(wanted)
        for index in wanted:
            if index not in read:
                self.entry(index)  # raises the error naming the missing entry
        return {index: AuditEntry.from_bytes(read[index][0]) for index in wanted}

    def entries(self, start: int = 0, *, skip_malformed: bool = False) -> Iterator[AuditEntry]:
        """Every entry from ``start`` in index order, read in batches.

        Raises ``TamperDetected`` at the first entry whose bytes are not a canonical entry, or
        passes over it when ``skip_malformed`` (a report of a log that ``verify`` found tampered).
        """
        for _idx, data, _leaf in self._rows(include_entry_from=start, start=start):
            try:
                yield AuditEntry.from_bytes(data or b"")
            except TamperDetected:
                if not skip_malformed:
                    raise

    def checkpoints(self) -> list[str]:
        """Every stored signed checkpoint, oldest first."""
        return [
            _note(r[0]) for r in self.store.query(f"SELECT {self._note} FROM audit_checkpoints ORDER BY id")
        ]

    def latest_checkpoint(self) -> str | None:
        row = self._latest_checkpoint_row()
        return _note(row[2]) if row else None

    def _latest_checkpoint_row(self) -> Row | None:
        rows = self.store.query(
            f"SELECT size, {self._root}, {self._note} FROM audit_checkpoints ORDER BY size DESC, id DESC LIMIT 1"
        )
        return rows[0] if rows else None

    def _row_batches(
        self, *, include_entry_from: int, start: int = 0
    ) -> Iterator[list[tuple[int, bytes | None, bytes]]]:
        """``(idx, entry or None, leaf_hash)`` rows in index order, from ``start``, in batches;
        entries only from ``include_entry_from``.

        A batch holds about ``_BATCH_BYTES`` (at most ``_BATCH`` rows): the first is small, the
        next sized by the entries seen so far, so a log of large entries is read in small batches.
        """
        last, limit = start - 1, min(_FIRST_BATCH, _BATCH)
        while True:
            # A NULL entry or leaf hash (a tampered table without its NOT NULL constraints)
            # reads as empty bytes: it then fails the leaf hash check instead of crashing. Both
            # dialects return the (cast) columns as bytes, so the rows are used as they come.
            rows = self.store.query(
                f"SELECT idx, CASE WHEN idx >= ? THEN COALESCE({self._entry}, {self._empty}) END, "
                f"COALESCE({self._leaf}, {self._empty}) FROM audit_log WHERE idx > ? ORDER BY idx LIMIT ?",
                (include_entry_from, last, limit),
            )
            batch = cast(list[tuple[int, bytes | None, bytes]], rows)
            if batch:
                yield batch
            if len(rows) < limit:
                return
            last = batch[-1][0]
            size = sum(len(entry) for _i, entry, _h in batch if entry is not None) + _ROW_BYTES * len(batch)
            limit = max(1, min(_BATCH, _BATCH_BYTES * len(batch) // size))

    def _batches(self, start: int = 0) -> Iterator[list[tuple[int, bytes, bytes]]]:
        """Every ``(idx, entry, leaf_hash)`` row from ``start`` in index order, in batches."""
        for batch in self._row_batches(include_entry_from=start, start=start):
            yield cast(list[tuple[int, bytes, bytes]], batch)  # every entry is included from start

    def _rows(self, *, include_entry_from: int, start: int = 0) -> Iterator[tuple[int, bytes | None, bytes]]:
        """``(idx, entry or None, leaf_hash)`` in index order; entries only from ``include_entry_from``."""
        for batch in self._row_batches(include_entry_from=include_entry_from, start=start):
            yield from batch

    def _checkpoint_rows(self) -> Iterator[Row]:
        """Every ``(note, size, root)`` checkpoint row, oldest first, read in batches."""
        last = -1
        while True:
            rows = self.store.query(
                f"SELECT id, {self._note}, size, {self._root} FROM audit_checkpoints WHERE id > ? ORDER BY id LIMIT ?",
                (last, _CHECKPOINT_BATCH),
            )
            for row in rows:
                yield row[1:]
            if len(rows) < _CHECKPOINT_BATCH:
                return
            last = int(rows[-1][0])

    def _subtree_roots(self, ranges: Sequence[tuple[int, int]], size: int) -> list[bytes]:
        """The Merkle roots of the disjoint leaf ranges ``[lo, hi)`` within the first ``size`` entries.

        Reads the stored leaf hashes once, in batches (memory does not grow with the log). Raises
        ``TamperDetected`` when the log has fewer than ``size`` entries or a gap before ``size``.
        """
        accumulators = [RootAccumulator() for _ in ranges]
        chunk: list[bytes] = []
        start = 0

        def feed() -> None:
            nonlocal start
            end = start + len(chunk)
            for (lo, hi), acc in zip(ranges, accumulators, strict=True):
                if max(lo, start) < min(hi, end):
                    acc.extend(chunk[max(lo, start) - start : min(hi, end) - start])
            start = end
            chunk.clear()

        for idx, _data, stored in self._rows(include_entry_from=size):
            if idx >= size:
                break
            if idx != start + len(chunk):
                raise TamperDetected(f"audit log: entry {start + len(chunk)} is missing")
            chunk.append(stored)
            if len(chunk) >= _BATCH:
                feed()
        feed()
        if start < size:
            raise TamperDetected(f"audit log has {start} entries, fewer than {size}")
        return [acc.root() for acc in accumulators]

    # --- proofs -------------------------------------------------------------------------------

    def prove(self, index: int, checkpoint_note: str | None = None) -> ProofBundle:
        """A tlog-proof bundle for entry ``index`` against ``checkpoint_note`` (default: a fresh one).

        Raises ``InputError`` if the entry does not exist or the checkpoint does not cover it
        (``BeyondLogEnd`` for an index past the end of the log, against a fresh checkpoint: then
        checked before anything is signed, so bad input stores no checkpoint), and
        ``TamperDetected`` when the entry's bytes do not lead to the checkpoint's root (edited in
        the database after it was signed): no bundle that cannot verify is returned.
        """
        index = _whole(index, "entry index")
        if checkpoint_note is None:  # bad input signs nothing
            if index < 0:
                raise InputError(f"audit log has no entry {index}")
            if index >= self._end():
                raise BeyondLogEnd(index, self.size(), "entry")
        note = self.checkpoint() if checkpoint_note is None else checkpoint_note
        checkpoint = self.open_checkpoint(note)
        if checkpoint_note is None and index >= checkpoint.size:
            raise BeyondLogEnd(index, checkpoint.size, "entry")
        if not 0 <= index < checkpoint.size:
            raise InputError(f"entry {index} is not covered by a checkpoint of size {checkpoint.size}")
        data = self.entry_bytes(index)
        ranges = inclusion_ranges(index, checkpoint.size)
        try:  # from the node cache when the proof it gives leads to the signed root
            proof = self._cached_roots(ranges)
            verify_inclusion(leaf_hash(data), index, checkpoint.size, proof, checkpoint.root)
        except TamperDetected:
            proof = self._subtree_roots(ranges, checkpoint.size)
            try:  # a bundle is written only when it verifies: the entry's bytes are the signed ones
                verify_inclusion(leaf_hash(data), index, checkpoint.size, proof, checkpoint.root)
            except TamperDetected as exc:
                raise TamperDetected(
                    f"audit log: entry {index} is not the entry its signed checkpoint holds ({exc})"
                ) from None
        return ProofBundle(index, data, tuple(proof), note)

    def consistency(self, size1: int, size2: int) -> list[bytes]:
        """The RFC 9162 consistency proof between two sizes of this log, read in one streaming pass.

        Raises ``InputError`` unless ``0 < size1 <= size2`` are ``int``, ``BeyondLogEnd`` (an ``InputError``)
        when the log holds fewer than ``size2`` entries, and ``TamperDetected`` when an entry
        before ``size2`` is missing.
        """
        size1, size2 = _whole(size1, "size"), _whole(size2, "size")
        try:
            ranges = consistency_ranges(size1, size2)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
        if size2 > self._end():
            raise BeyondLogEnd(size2, self.size())
        return self._subtree_roots(ranges, size2)

    def _end(self) -> int:
        """One past the largest stored index (the log's size, unless rows are missing)."""
        return int(self.store.query("SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log")[0][0])

    def explain(self, index: int) -> Explanation:
        """Entry ``index`` with the entries of its decision or call, each proven to be in the log.

        Related entries are those that refer to it (``ref``: its outcome, approvals given, a
        declined approval) and the one it refers to. They are found through the reference index
        (``audit_refs``) when it is complete, reading only those rows, else by reading the whole
        log. Each entry shown is parsed from its canonical bytes, matched against its stored leaf
        hash, and proven by an inclusion proof against the latest stored checkpoint (its signature
        checked); entries newer than that checkpoint are listed in ``unproven``. Raises
        ``BeyondLogEnd`` for an index past the end of the log, ``InputError`` for a missing entry
        or an index that is not an ``int``,
        and ``TamperDetected`` when an entry shown is malformed, does not carry its own index or
        leaf hash, or is not in the signed tree.
        """
        index = _whole(index, "entry index")
        data, stored = self._stored_row(index)
        entry = AuditEntry.from_bytes(data)
        shown = {index: (data, stored, entry), **self._related(index, entry.ref)}
        for idx, (row_data, row_stored, parsed) in shown.items():
            if parsed.index != idx:
                raise TamperDetected(f"audit log: entry {idx} holds the entry of index {parsed.index}")
            if leaf_hash(row_data) != row_stored:
                raise TamperDetected(f"audit log: entry {idx} does not match its leaf hash")
        # Each stored leaf hash was just checked against its entry's bytes: proven as it is.
        checkpoint, unproven = self._prove_included(
            {idx: row_stored for idx, (_d, row_stored, _e) in shown.items()}
        )
        related = tuple(parsed for idx, (_d, _s, parsed) in sorted(shown.items()) if idx != index)
        return Explanation(entry, related, checkpoint, unproven, self.refs_indexed)

    def referring(self, index: int) -> list[AuditEntry]:
        """The entries whose ``ref`` is ``index`` (its outcomes, approvals given...), in index
        order, each parsed from its row: through the reference index when it is complete, else by
        reading the whole log. ``TamperDetected`` for a malformed one."""
        related = self._related(_whole(index, "entry index"), None)
        return [related[idx][2] for idx in sorted(related)]

    def _related(self, index: int, ref: int | None) -> dict[int, tuple[bytes, bytes, AuditEntry]]:
        """``idx -> (entry, leaf hash, parsed)`` of the entries other than ``index`` that refer to
        it, and of entry ``ref``."""
        related: dict[int, tuple[bytes, bytes, AuditEntry]] = {}
        if self.refs_indexed:
            refs = {int(r[0]) for r in self.store.query("SELECT idx FROM audit_refs WHERE ref = ?", (index,))}
            if ref is not None:
                refs.add(ref)
            rows: Iterable[tuple[int, bytes, bytes]] = (
                (idx, data, stored) for idx, (data, stored) in self._read_rows(sorted(refs - {index})).items()
            )
        else:
            rows = (row for batch in self._batches() for row in batch)
        for idx, data, stored in rows:
            # The reference index is no evidence: each row it names is read, parsed and checked.
            other = AuditEntry.from_bytes(data)
            if idx != index and (other.ref == index or idx == ref):
                related[idx] = (data, stored, other)
        return related

    def _read_rows(
        self, indexes: Sequence[int], tx: Transaction | None = None
    ) -> dict[int, tuple[bytes, bytes]]:
        """``idx -> (entry, leaf_hash)`` of the rows among ``indexes`` that exist, read by key
        (in ``tx`` when given)."""
        found: dict[int, tuple[bytes, bytes]] = {}
        read = self.store.query if tx is None else tx.execute
        for start in range(0, len(indexes), 500):
            chunk = list(indexes[start : start + 500])
            marks = ", ".join("?" * len(chunk))
            for idx, data, stored in read(
                f"SELECT idx, {self._entry}, {self._leaf} FROM audit_log WHERE idx IN ({marks})", chunk
            ):
                found[int(idx)] = (_bytes(data), _bytes(stored))
        return found

    def _prove_included(self, leaves: Mapping[int, bytes]) -> tuple[Checkpoint | None, tuple[int, ...]]:
        """Prove each ``index -> leaf hash`` in ``leaves`` included in the latest stored checkpoint.

        Returns that checkpoint (``None`` when there is none) and the indexes it does not cover.
        One pass over the stored leaf hashes below its size computes every proof. Raises
        ``TamperDetected`` when its signature or a proof fails.
        """
        row = self._latest_checkpoint_row()
        if row is None:
            return None, tuple(sorted(leaves))
        checkpoint = self.open_checkpoint(_note(row[2]))
        size = checkpoint.size
        covered = sorted(idx for idx in leaves if idx < size)
        paths = [inclusion_ranges(idx, size) for idx in covered]
        ranges = [r for path in paths for r in path]

        def check(roots: list[bytes]) -> None:
            for idx, path in zip(covered, paths, strict=True):
                proof, roots = roots[: len(path)], roots[len(path) :]
                try:
                    verify_inclusion(leaves[idx], idx, size, proof, checkpoint.root)
                except TamperDetected as exc:
                    raise TamperDetected(
                        f"audit log: entry {idx} is not in the tree signed at size {size}: {exc}"
                    ) from exc

        if covered:
            try:
                check(self._cached_roots(ranges))
            except TamperDetected:
                # The cache is no evidence: rebuilt from the stored leaf hashes alone, the proof
                # either holds (a cached node was wrong: the cache is emptied) or the log is bad.
                check(self._subtree_roots(ranges, size))
                self._forget_nodes()
        return checkpoint, tuple(sorted(idx for idx in leaves if idx >= size))

    def _cached_roots(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The roots of the RFC 9162 subtrees ``[lo, hi)`` in ``ranges`` (as ``_subtree_roots``),
        from the cached roots of whole blocks (``audit_nodes``, computed and stored when missing)
        and the leaf hashes of the rest. A subtree of at least one block starts at a multiple of it.
        Raises ``TamperDetected`` when a leaf hash it needs is missing."""
        width = 1 << _NODE_LEVEL
        blocks: set[int] = set()
        for lo, hi in ranges:
            if hi - lo >= width:
                blocks.update(range(lo // width, hi // width))
        cached = self._nodes(blocks)
        roots = []
        for lo, hi in ranges:
            acc = RootAccumulator()
            start = lo
            if hi - lo >= width:
                for block in range(lo // width, hi // width):
                    acc.push_subtree(cached[block], _NODE_LEVEL)
                start = hi // width * width
            acc.extend(self._leaves(start, hi))
            roots.append(acc.root())
        return roots

    def _nodes(self, blocks: set[int]) -> dict[int, bytes]:
        """``block -> root`` of each block of ``2**_NODE_LEVEL`` leaves in ``blocks``: read from
        ``audit_nodes``, or computed from the leaf hashes and stored there (best effort: a role
        that may not write the cache, or a log without it, only computes)."""
        found: dict[int, bytes] = {}
        ordered = sorted(blocks)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            try:
                rows = self.store.query(
                    f"SELECT position, {self._hash} FROM audit_nodes "
                    "WHERE level = ? AND position >= ? AND position <= ?",
                    (_NODE_LEVEL, chunk[0], chunk[-1]),
                )
            except loaded_driver_errors(StoreError):
                rows = []
            # SQLite keeps whatever a row was given: a position that is not an integer is no
            # block, and a hash of another type or length is a wrong node (the proof fails and
            # is rebuilt from the leaf hashes), never an exception.
            found.update((p, _bytes(h)) for p, h in rows if type(p) is int and p in blocks)
        missing = [b for b in ordered if b not in found]
        width = 1 << _NODE_LEVEL
        for start in range(0, len(missing), 64):
            made = []
            for block in missing[start : start + 64]:
                acc = RootAccumulator()
                acc.extend(self._leaves(block * width, (block + 1) * width))
                found[block] = acc.root()
                made.append((_NODE_LEVEL, block, found[block]))
            try:
                with self.store.transaction() as tx:
                    tx.executemany(
                        "INSERT INTO audit_nodes (level, position, hash) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                        made,
                    )
            except loaded_driver_errors(StoreError):
                pass  # a cache only: the next explain computes these again
        return found

    def _forget_nodes(self) -> None:
        """Empty the node cache (one of its roots did not match the leaf hashes), if allowed."""
        try:
            with self.store.transaction() as tx:
                tx.execute("DELETE FROM audit_nodes")
        except loaded_driver_errors(StoreError):
            pass

    def _leaves(self, lo: int, hi: int) -> list[bytes]:
        """The stored leaf hashes of entries ``[lo, hi)``; ``TamperDetected`` if one is missing."""
        rows = self.store.query(
            f"SELECT {self._leaf} FROM audit_log WHERE idx >= ? AND idx < ? ORDER BY idx", (lo, hi)
        )
        if len(rows) != hi - lo:
            raise TamperDetected(f"audit log: entries are missing between {lo} and {hi}")
        return [_bytes(row[0]) for row in rows]

    # --- verification -------------------------------------------------------------------------

    def verify(self, saved_checkpoint: str | None = None) -> VerifyReport:
        """Recompute the tree from the entries' bytes and check everything that can be checked.

        Checks: indexes run from 0 without gaps; each entry's bytes match its stored leaf hash;
        each entry that no checkpoint covers carries its own index; each checkpoint row's size and
        root columns match its signed note;
        every stored checkpoint is signed by the log key, and no two disagree about one size; the
        recomputed root at each checkpoint's size equals its root; no checkpoint is larger than
        the log (deleted entries, or a database restored from an older copy); the log is
        consistent with ``saved_checkpoint`` (a signed note kept elsewhere) when one is given; and
        the reference index ``audit_refs`` (when this log keeps one) holds exactly the ``(idx, ref)``
        pairs the entries carry, in the same pass (a missing or changed row hides an entry from
        ``explain``; such a problem names no bad index, the entries being intact).
        Never raises for a tampered log: the report names the first bad index and what is wrong.
        """
        problems: list[str] = []
        bad: list[int] = []
        expected, checked, saved_only = self._signed_roots(saved_checkpoint, problems)
        acc = RootAccumulator()
        last_good = 0
        refs_seen = 0  # rows of audit_refs compared with the entries they index
        sizes = sorted(expected)
        uncovered = sizes[-1] if sizes else 0
        for rows in self._batches():
            first, count = acc.size, len(rows)
            if rows[0][0] != first or rows[-1][0] != first + count - 1:  # ordered and unique: a gap inside
                gap = next(k for k, row in enumerate(rows) if row[0] != first + k)
                problems.append(f"entry {first + gap}: missing (the next stored index is {rows[gap][0]})")
                bad.append(first + gap)
                rows = rows[:gap]
            computed = [_sha256(b"\x00" + row[1]).digest() for row in rows]
            stored = [row[2] for row in rows]
            edited = set()
            if computed != stored:
                for k, (c, h) in enumerate(zip(computed, stored, strict=True)):
                    if c != h:
                        problems.append(
                            f"entry {first + k}: bytes do not match the stored leaf hash (entry edited)"
                        )
                        bad.append(first + k)
                        edited.add(k)
            # Entries no stored checkpoint covers: only their own index field can show that rows
            # were swapped or moved (with their leaf hashes), and only their form that bytes no
            # agentgate wrote were put there, so each of them is read and re-encoded.
            misplaced: set[int] = set()
            for k in range(max(0, uncovered - first), len(rows)):
                carried = _index_of(rows[k][1])
                if k not in edited and carried != first + k:
                    what = (
                        "is not a canonical entry (bytes written outside agentgate)"
                        if carried is None
                        else f"holds the entry of index {carried} (rows moved, inserted or reordered)"
                    )
                    problems.append(f"entry {first + k}: {what}")
                    bad.append(first + k)
                    misplaced.add(k)
            if self.refs_indexed:
                refs_seen += self._check_refs(rows, edited | misplaced, problems)
            last_good = self._feed(acc, computed, sizes, expected, saved_only, last_good, bad, problems)
            if len(rows) < count:
                break
        size = acc.size
        if self.refs_indexed:
            # Rows past the entries read are left alone: an entry appended since (its row committed
            # with it) must not read as tampering, and a row for an index not written yet only
            # names an entry that does not exist (the trigger overwrites it when one is written).
            rows_in_index = int(
                self.store.query(
                    "SELECT COUNT(*) FROM audit_refs WHERE idx >= 0 AND idx < ? AND ref < ?", (size, _MAX_REF)
                )[0][0]
            )
            if rows_in_index != refs_seen:
                problems.append(
                    f"audit_refs has {rows_in_index - refs_seen} row(s) that verify did not compare with "
                    "their entries (the reference index changed while verify read it)"
                )
        for cp_size in sorted(s for s in expected if s > size):
            problems.append(
                f"a checkpoint covers {cp_size} entries but the log has {size}: "
                "entries were deleted or the database was restored from an older copy"
            )
            bad.append(size)
        return VerifyReport(size, acc.root(), checked, min(bad) if bad else None, tuple(problems))

    def _signed_roots(
        self, saved_checkpoint: str | None, problems: list[str]
    ) -> tuple[dict[int, bytes], int, int | None]:
        """The root each stored checkpoint (and ``saved_checkpoint``) signs, by size; how many
        checkpoint rows were compared with their notes; and the size of the saved checkpoint when
        no stored one has it. Each note that does not open, each row whose columns disagree with
        its note and each fork is appended to ``problems``."""
        expected: dict[int, bytes] = {}
        checked = 0
        in_rows: set[int] = set()  # the sizes of the stored checkpoints
        saved_only: int | None = None  # the size of the saved checkpoint, when no stored one has it
        # Checkpoints are read in batches and only their sizes and roots kept: a log checkpointed
        # every minute for a year has half a million of them.
        # The size column is compared as stored (SQLite keeps text, bytes or a fraction there if
        # given one): such a row is reported as edited, never converted or raised on.
        in_table: Iterator[tuple[str, object, bytes | None]] = (
            (_note(note), size, _bytes(root)) for note, size, root in self._checkpoint_rows()
        )
        saved = [(saved_checkpoint, None, None)] if saved_checkpoint else []
        for position, (note, size_column, root_column) in enumerate(itertools.chain(in_table, saved), 1):
            label = f"checkpoint #{position}" if size_column is not None else "saved checkpoint"
            try:
                cp = self.open_checkpoint(note)
            except TamperDetected as exc:  # may quote the note: a tamperer's text
                problems.append(f"{label}: {one_line(str(exc))}")
                continue
            # The row's size and root columns are what the next checkpoint() builds on: edited,
            # they make it refuse to sign, so they are checked against the signed note here too.
            if size_column is not None:
                checked += 1
                if (cp.size, cp.root) != (size_column, root_column) or type(size_column) is not int:
                    problems.append(
                        f"{label}: its size or root column does not match its signed note (row edited)"
                    )
            if cp.size in expected and expected[cp.size] != cp.root:
                problems.append(f"{label}: two checkpoints of size {cp.size} have different roots (a fork)")
                continue
            expected[cp.size] = cp.root
            if size_column is not None:
                in_rows.add(cp.size)
            elif cp.size not in in_rows:
                saved_only = cp.size
        return expected, checked, saved_only

    def _feed(
        self,
        acc: RootAccumulator,
        computed: list[bytes],
        sizes: list[int],
        expected: dict[int, bytes],
        saved_only: int | None,
        last_good: int,
        bad: list[int],
        problems: list[str],
    ) -> int:
        """Add the leaf hashes ``computed`` to ``acc`` in segments that end at checkpoint sizes
        (``sizes``, sorted), checking the root at each against ``expected``; a root that does not
        match is appended to ``problems`` with its cause (an entry ``bad`` names already, or the
        first bad index ``_diagnose`` finds, added to ``bad``; at ``saved_only``, the size only the
        saved checkpoint has, an edit no entry shows reads as a restore). Returns the size of the
        last checkpoint whose root matched."""
        position = 0
        while position < len(computed):
            after = bisect.bisect_right(sizes, acc.size)  # the next checkpoint size
            target = sizes[after] if after < len(sizes) else None
            take = (
                len(computed) - position
                if target is None
                else min(target - acc.size, len(computed) - position)
            )
            acc.extend(computed[position : position + take])
            position += take
            want = expected.get(acc.size)
            if want is None:
                continue
            if acc.root() == want:
                last_good = acc.size
                continue
            named = [i for i in bad if last_good <= i < acc.size]
            if named:
                cause = f"explained by entry {named[0]} above"
            else:
                first_bad, cause = self._diagnose(last_good, acc.size)
                bad.append(first_bad)
                if acc.size == saved_only and cause.endswith(_CHANGED_WITH_LEAF_HASH):
                    # No entry shows an edit: a log that grew again after a restore does too.
                    cause = (
                        f"the log does not extend the saved checkpoint: the database was restored "
                        f"from an older copy (or forked from one) and grew again, or {cause}; it "
                        f"agrees with the stored checkpoints up to size {last_good}"
                    )
            problems.append(f"checkpoint of size {acc.size}: root does not match the entries; {cause}")
        return last_good

    def _check_refs(
        self, rows: Sequence[tuple[int, bytes, bytes]], skip: set[int], problems: list[str]
    ) -> int:
        """Compare the rows of ``audit_refs`` for the entries ``rows`` (consecutive indexes) with the
        references those entries carry, appending each difference to ``problems``; entries at
        positions ``skip`` (already reported: edited, moved or not canonical) are left out.
        Returns how many index rows it read.

        The reference is read from each entry's bytes (the last ``,"ref":``) by C-level scans, not by
        parsing the entry: this runs for every entry ``verify`` reads. An intact batch is confirmed
        with C-level calls (a count of the entries whose reference is null, and each row's
        reference where its entry's is); only a batch where that fails is examined entry by entry
        to name the differences.
        """
        if not rows:
            return 0
        first, count = rows[0][0], len(rows)
        entries = list(map(operator.itemgetter(1), rows))
        at = list(map(bytes.rfind, entries, itertools.repeat(_REF_KEY)))
        table = self.store.query(
            "SELECT idx - ?, ref FROM audit_refs WHERE idx >= ? AND idx < ? AND ref < ? ORDER BY idx",
            (first, first, first + count, _MAX_REF),
        )
        if not skip:
            # Intact when each row's entry holds the row's reference at its last ,"ref": (so the
            # rows, one per index, are among the entries with a reference) and there are as many
            # rows as entries whose reference is not null.
            nulls = sum(map(bytes.startswith, entries, itertools.repeat(_REF_KEY + _NO_REF), at))
            spots = list(map(operator.itemgetter(0), table))
            refs = list(map(operator.itemgetter(1), table))
            needles = map(_REF_NEEDLE.__mod__, refs)
            # Whole numbers only: %d would read a reference SQLite keeps as 0.5 as the 0 it is not
            # (explain looks for 0 and does not find that row).
            if (
                len(table) == count - nulls
                and set(map(type, refs)) <= {int}
                and all(map(bytes.startswith, _pick(entries, spots), needles, _pick(at, spots)))
            ):
                return len(table)
        said: dict[int, int] = {}
        for k, (data, found) in enumerate(zip(entries, at, strict=True)):
            start = found + len(_REF_KEY)
            digits = data[start : data.find(b",", start)]
            if found >= 0 and 0 < len(digits) <= 18 and digits.isdigit():
                said[first + k] = int(digits)
        held = {first + int(spot): ref for spot, ref in table}  # as stored: 0.5 is not 0
        for k in skip:
            said.pop(first + k, None)
            held.pop(first + k, None)
        for idx in sorted(said.keys() | held.keys()):
            ref, row = said.get(idx), held.get(idx)
            if ref == row:
                continue
            if ref is None:
                problems.append(
                    f"audit_refs has a row for entry {idx} (to {row}), which refers to no entry "
                    "(the reference index was tampered with)"
                )
                continue
            held_text = "has no row for it" if row is None else f"says {row}"
            problems.append(
                f"entry {idx} refers to entry {ref}, but audit_refs {held_text} (the reference index was "
                f"tampered with: audit explain {ref} would not show entry {idx})"
            )
        return len(table)

    def _diagnose(self, lo: int, hi: int) -> tuple[int, str]:
        """Find the first entry in ``[lo, hi)`` that is not what it claims to be (after a root mismatch)."""
        for idx, data, _stored in self._rows(include_entry_from=lo, start=lo):
            if idx >= hi:
                break
            try:
                entry = AuditEntry.from_bytes(data or b"")
            except TamperDetected as exc:  # may quote what the entry holds: a tamperer's text
                return idx, f"entry {idx} is malformed: {one_line(str(exc))}"
            if entry.index != idx:
                return idx, f"entry {idx} holds the entry of index {entry.index} (inserted or reordered)"
        return lo, f"an entry in [{lo}, {hi}) {_CHANGED_WITH_LEAF_HASH}"
