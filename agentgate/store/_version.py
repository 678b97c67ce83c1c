"""The store's schema version: one row, which agentgate may write the store and which wrote it.

``agentgate_schema`` holds one row (``id`` 1) with two numbers:

* ``version``: the oldest ``SCHEMA_VERSION`` whose code may still open the store, the
  ``OLDEST_WRITER`` of the newest agentgate that created or upgraded any part's tables in it. An
  agentgate whose ``SCHEMA_VERSION`` is below it is refused the store as it opens
  (``NewerStore``), to write or to read only, before anything is written.
* ``newest``: the ``SCHEMA_VERSION`` of that newest agentgate (the store's high-water mark); null
  or absent in a row written by schema version 1, which read it as ``version``.

The column that decides is ``version``, the one schema version 1 (which knew no other) reads and
refuses a store by when it is above its own: so the rule holds for the agentgate in the field
too, and a change an older agentgate may write alongside (``OLDEST_WRITER`` kept) lets it in
(docs/operations.md, Upgrading). Both numbers only rise: every ``ensure_schema`` that may write
raises them to this code's in the transaction that runs the part's DDL, so the row never says
more than the tables hold. It is a high-water mark, not a migration state: a part is still
brought up to this version by its own idempotent DDL when this code opens it, whatever the row
says (a store's parts are made lazily, one by one).

One row for the whole store, not one per part: an operator installs, upgrades and rolls back
agentgate as a whole, and a decision touches several parts (grants, ledger, audit log) at once,
so a process of an older version is refused the store as a whole, before it writes to any part.
A read-only open is held to the same floor as a write: an older reader of a change it may not
write alongside reads the store wrongly without failing (a revocation kept where it does not look
is no revocation to ``grant check``). A store without the table (made before it existed) is read
as this version and recorded as such by its next writer.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.errors import MalformedRow, NewerStore
from agentgate.store._base import Dialect, Transaction, sqlite_name

SCHEMA_VERSION = 4
"""This code's schema version. Raise it whenever the DDL of any part changes (a table, column,
index, constraint, trigger or function), and record the new layout
(``tests/test_store_r68_schema_fingerprint.py`` fails until both are done)."""

OLDEST_WRITER = 1
"""The oldest ``SCHEMA_VERSION`` whose code still reads and writes a store this code made or
upgraded correctly: this code's changes since it are ones that code ignores without harm (a new
table it never reads, a nullable column it never fills). Set it to ``SCHEMA_VERSION`` for a
change it would read or write wrongly; it never goes down from one version to the next.
Version 2 added ``newest`` to ``agentgate_schema``, which version 1 never reads. Version 3 added
``agentgate_agent_names`` (the free agent names granted, ``agentgate.store.agent_names``), which
versions 1 and 2 never read nor write: their grants are not claimed there, so a Gate of version 3
does not know the names they grant (as no Gate knew another's before), and nothing they decide
reads it. Version 4 added the index ``approval_grants_grant`` (review R95), which earlier versions
keep up as they write and need not know."""

VERSION_TABLE = "agentgate_schema"

_CREATE = f"""CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    newest INTEGER
)"""
VERSION_DDL: dict[Dialect, str] = {"sqlite": _CREATE, "postgresql": _CREATE}

_COLUMNS: dict[Dialect, str] = {
    "sqlite": f"SELECT name FROM pragma_table_info('{VERSION_TABLE}')",
    "postgresql": (
        "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = "
        f"to_regclass('{VERSION_TABLE}') AND attnum > 0 AND NOT attisdropped"
    ),
}
"""The columns of ``agentgate_schema``; none where the table is missing."""


def _columns(tx: Transaction, dialect: Dialect) -> set[str]:
    """The columns of ``agentgate_schema`` (``_COLUMNS``), SQLite's as it compares names
    (``sqlite_name``: until review R88 a column ``NEWEST`` was missed, and added again as a
    duplicate SQLite refused, so every writable opening of the store failed)."""
    return {
        sqlite_name(str(row[0])) if dialect == "sqlite" else str(row[0])
        for row in tx.execute(_COLUMNS[dialect])
    }


@dataclass(frozen=True)
class SchemaRecord:
    """What ``agentgate_schema`` records."""

    oldest_writer: int
    """The oldest schema version that may open the store (the column ``version``)."""
    newest: int
    """The schema version of the newest agentgate that wrote it (``oldest_writer`` in a row of
    schema version 1, which has no ``newest``)."""


def recorded_version(tx: Transaction, dialect: Dialect) -> SchemaRecord | None:
    """What ``agentgate_schema`` records; ``None`` for a store without the table or row (one made
    before it existed, or a new one); ``MalformedRow`` for a row whose ``version`` is no whole
    number of at least 1, or whose ``newest`` is neither null nor one."""
    columns = _columns(tx, dialect)
    if not columns:
        return None
    has_newest = "newest" in columns
    rows = tx.execute(f"SELECT version{', newest' if has_newest else ''} FROM {VERSION_TABLE} WHERE id = 1")
    if not rows:
        return None
    oldest = rows[0][0]
    # Edited by hand (SQLite keeps text in an INTEGER column): refused, never read as a number
    # (until review R67's lead pass, int() raised ValueError as the store opened, and 1.5 or -1
    # were taken as versions).
    if type(oldest) is not int or oldest < 1:
        raise _malformed("version", oldest)
    newest = rows[0][1] if has_newest else None
    if newest is None:
        return SchemaRecord(oldest, oldest)
    if type(newest) is not int or newest < 1:
        raise _malformed("newest", newest)
    # Below ``version`` only where ``version`` was raised by hand (to lock older processes out):
    # the floor decides, and no agentgate below it wrote the store since.
    return SchemaRecord(oldest, max(newest, oldest))


def _malformed(column: str, value: object) -> MalformedRow:
    return MalformedRow(
        f"{VERSION_TABLE}: its {column} holds {value!r:.60}, not a schema version (a whole number, "
        "1 or more): edited outside agentgate? Put back the version that wrote the store"
    )


def refuse_newer(shown_store: str, recorded: SchemaRecord | None) -> None:
    """Raise ``NewerStore`` when the store's oldest writer is above ``SCHEMA_VERSION``;
    ``shown_store``: the store as an error may name it (no password)."""
    if recorded is not None and recorded.oldest_writer > SCHEMA_VERSION:
        raise NewerStore(
            f"the store {shown_store} was written by a newer agentgate (schema version "
            f"{recorded.newest}, which agentgate of schema version {recorded.oldest_writer} or later "
            f"may open; this agentgate knows version {SCHEMA_VERSION} and older): nothing was "
            f"written; upgrade agentgate to schema version {recorded.oldest_writer} or later "
            "(docs/operations.md, Upgrading)",
            recorded=recorded.newest,
            known=SCHEMA_VERSION,
            oldest_writer=recorded.oldest_writer,
        )


def needs_record(recorded: SchemaRecord | None) -> bool:
    """Whether this code's writing raises the row (``record_version`` would change it)."""
    return recorded is None or recorded != _raised(recorded)


def _raised(recorded: SchemaRecord | None) -> SchemaRecord:
    if recorded is None:
        return SchemaRecord(OLDEST_WRITER, SCHEMA_VERSION)
    return SchemaRecord(max(recorded.oldest_writer, OLDEST_WRITER), max(recorded.newest, SCHEMA_VERSION))


def record_version(tx: Transaction, dialect: Dialect, recorded: SchemaRecord | None) -> None:
    """Raise the row to this code's ``OLDEST_WRITER`` and ``SCHEMA_VERSION`` in ``tx`` (the
    transaction of a part's DDL), never lowering either, adding ``newest`` to a table of schema
    version 1; nothing when the row holds them already."""
    if not needs_record(recorded):
        return
    if "newest" not in _columns(tx, dialect):
        tx.execute(f"ALTER TABLE {VERSION_TABLE} ADD COLUMN newest INTEGER")
    raised = _raised(recorded)
    tx.execute(
        f"INSERT INTO {VERSION_TABLE} (id, version, newest) VALUES (1, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET version = excluded.version, newest = excluded.newest",
        (raised.oldest_writer, raised.newest),
    )
