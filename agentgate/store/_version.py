"""The store's schema version: one row, the newest version of agentgate's schema written to it.

``agentgate_schema`` holds one row (``id`` 1): ``version``, the ``SCHEMA_VERSION`` of the newest
agentgate that created or upgraded any part's tables in the store. Every ``ensure_schema`` that
may write raises it to this code's version in the transaction that runs the part's DDL, so the
row never says more than the tables hold. It is a high-water mark, not a migration state: a part
is still brought up to this version by its own idempotent DDL when this code opens it, whatever
the row says (a store's parts are made lazily, one by one).

One row for the whole store, not one per part: an operator installs, upgrades and rolls back
agentgate as a whole, and a decision touches several parts (grants, ledger, audit log) at once,
so a process of an older version is refused the store as a whole, before it writes to any part.

A store whose row is above ``SCHEMA_VERSION`` was written by a newer agentgate, whose tables this
code may write wrongly (a column it does not fill, a table it does not know): opening it raises
``NewerStore``, read only or not, before anything is written. A store without the table (made
before it existed) is read as this version and recorded as such by its next writer.
"""

from __future__ import annotations

from agentgate.errors import MalformedRow, NewerStore
from agentgate.store._base import Dialect, Transaction

SCHEMA_VERSION = 1
"""This code's schema version. Raise it when a part's tables change so that an earlier
agentgate would write the store wrongly (a table or a ``NOT NULL`` column it does not know)."""

VERSION_TABLE = "agentgate_schema"

_CREATE = f"""CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
)"""
VERSION_DDL: dict[Dialect, str] = {"sqlite": _CREATE, "postgresql": _CREATE}

_EXISTS: dict[Dialect, str] = {
    "sqlite": f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{VERSION_TABLE}'",
    "postgresql": f"SELECT 1 WHERE to_regclass('{VERSION_TABLE}') IS NOT NULL",
}


def recorded_version(tx: Transaction, dialect: Dialect) -> int | None:
    """The version ``agentgate_schema`` records; ``None`` for a store without the table or row
    (one made before it existed, or a new one); ``MalformedRow`` for a row that holds no whole
    number of at least 1."""
    if not tx.execute(_EXISTS[dialect]):
        return None
    rows = tx.execute(f"SELECT version FROM {VERSION_TABLE} WHERE id = 1")
    if not rows:
        return None
    version = rows[0][0]
    # Edited by hand (SQLite keeps text in an INTEGER column): refused, never read as a number
    # (until review R67's lead pass, int() raised ValueError as the store opened, and 1.5 or -1
    # were taken as versions).
    if type(version) is not int or version < 1:
        raise MalformedRow(
            f"{VERSION_TABLE}: its row holds {version!r:.60}, not a schema version (a whole "
            "number, 1 or more): edited outside agentgate? Put back the version that wrote the store"
        )
    return version


def refuse_newer(shown_store: str, recorded: int | None) -> None:
    """Raise ``NewerStore`` when ``recorded`` is above ``SCHEMA_VERSION``; ``shown_store``: the
    store as an error may name it (no password)."""
    if recorded is not None and recorded > SCHEMA_VERSION:
        raise NewerStore(
            f"the store {shown_store} was written by a newer agentgate (schema version {recorded}; "
            f"this agentgate knows version {SCHEMA_VERSION} and older): nothing was written; "
            "upgrade agentgate to the version that wrote it (docs/operations.md, Upgrading)",
            recorded=recorded,
            known=SCHEMA_VERSION,
        )


def record_version(tx: Transaction, recorded: int | None) -> None:
    """Raise the row to ``SCHEMA_VERSION`` in ``tx`` (the transaction of a part's DDL) unless
    ``recorded`` is that already."""
    if recorded != SCHEMA_VERSION:
        tx.execute(
            f"INSERT INTO {VERSION_TABLE} (id, version) VALUES (1, ?) "
            "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
            (SCHEMA_VERSION,),
        )
