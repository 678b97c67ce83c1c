"""The store: one small connection layer, two dialects.

Every domain (grants and revocations, nonces, audit log, budget ledger, approvals, leases) keeps
its SQL in its own module under ``agentgate/store/`` and runs it through this interface, so that
PostgreSQL is one more implementation of the connection layer, not a second copy of every query.
SQL is written with ``?`` placeholders; the PostgreSQL implementation rewrites them to ``%s``.
Portable SQL only in the shared statements (``INSERT ... ON CONFLICT``, ``RETURNING``, CTEs);
DDL may differ per dialect and is given per dialect to ``ensure_schema``.
"""

from __future__ import annotations

import abc
import math
import os
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from agentgate._shown import quoted
from agentgate.errors import InputError, StoreError

if TYPE_CHECKING:
    from agentgate.store._version import SchemaRecord

Dialect = Literal["sqlite", "postgresql"]
Row = tuple[Any, ...]


def unstorable_text(exc: UnicodeEncodeError) -> StoreError:
    """The ``StoreError`` for a text parameter that is not valid Unicode (a lone surrogate, from a
    name decoded with ``surrogateescape``): no store can hold it, and the driver's bare
    ``UnicodeEncodeError`` would escape every caller that fails closed on ``StoreError``. The
    statement is not run; the text is not quoted (it may be a secret)."""
    return StoreError(
        f"a text value is not UTF-8 text: it holds a character that is not valid Unicode (position "
        f"{exc.start}, {exc.reason}); no store can hold it, the statement was not run"
    )


T = TypeVar("T")


def env_setting(name: str, convert: Callable[[str], T], default: T, what: str) -> T:
    """The environment variable ``name`` converted by ``convert`` (``default`` when unset or
    blank); ``InputError`` naming it when ``convert`` refuses it (``what``: what it must be).
    Its range is the caller's to check."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return convert(text)
    except ValueError:
        raise InputError(f"{name} must be {what}, got {text[:80]!r}") from None


MAX_STORED_INTEGER = 2**63 - 1
"""The largest integer a statement's parameter may be on both stores (SQLite's INTEGER and
PostgreSQL's BIGINT are 64-bit signed; a larger one overflowed the SQLite driver)."""


def whole_number(value: object, name: str, least: int, most: int = MAX_STORED_INTEGER) -> int:
    """``value`` if it is an ``int`` (a bool is not one) from ``least`` to ``most``; else
    ``InputError`` naming ``name``. For what a library caller hands a store method and the
    method hands a statement (a ``LIMIT``, a count of slots), where the two stores read a value
    out of range differently (SQLite's ``LIMIT -1`` is no limit, PostgreSQL refuses it)."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise InputError(f"{name} must be a whole number from {least} to {most}, got {quoted(value)}")
    return value


def positive_number(
    value: object, name: str, most: float = sys.float_info.max, *, least: float | None = None
) -> float:
    """``value`` as a float if it is a finite ``int`` or ``float`` (a bool is not one) above 0 (at
    least ``least`` when given) and at most ``most``; else ``InputError`` naming ``name``. NaN
    passed ``value <= 0`` checks (every comparison with it is false), and infinity is no length of
    time a store can add to a clock."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not ((value >= least if least is not None else value > 0) and value <= most)
    ):
        below = f"of at least {least:g}" if least is not None else "above 0"
        bound = "" if most == sys.float_info.max else f" and at most {most:g}"
        raise InputError(f"{name} must be a finite number {below}{bound}, got {quoted(value)}")
    return float(value)


def unix_time(value: object, name: str) -> float:
    """``value`` as a float if it is a finite ``float`` or an ``int`` (a bool is not one) within
    ``MAX_STORED_INTEGER`` either side of 0: a time in Unix seconds a statement compares a column
    with. Else ``InputError`` naming ``name``: the stores read NaN differently (SQLite binds it as
    NULL, which no row is below; PostgreSQL sorts it above every number, which every row is)."""
    if isinstance(value, bool) or not (
        (isinstance(value, float) and math.isfinite(value))
        or (isinstance(value, int) and -MAX_STORED_INTEGER <= value <= MAX_STORED_INTEGER)
    ):
        raise InputError(f"{name} must be a finite number of Unix seconds, got {quoted(value)}")
    return float(value)


def driver_error_line(exc: BaseException) -> str:
    """A database driver's failure in one line: a PostgreSQL server error as its primary message
    and SQLSTATE, without the lines psycopg's text adds after it (``CONTEXT: PL/pgSQL function
    ... at RAISE``, ``LINE 1:`` and its caret, ``HINT:``; until review R61 they ran into the CLI's
    one-line error); any other (SQLite's, a lost connection) as the driver words it, on one line."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if not primary:
        return " ".join(str(exc).split())
    code = getattr(exc, "sqlstate", None)
    return " ".join(str(primary).split()) + (f" (SQLSTATE {code})" if code else "")


def loaded_driver_errors(*also: type[Exception]) -> tuple[type[Exception], ...]:
    """``also``, then the error classes of the database drivers this process has loaded:
    sqlite3's, and psycopg's once a PostgreSQL store imported it (``Store.driver_errors`` is one
    store's). For ``except`` clauses, where it is evaluated only when something was raised: a
    driver that is not loaded cannot have raised, and a command on a SQLite store never loads
    PostgreSQL's driver to name its error class."""
    psycopg = sys.modules.get("psycopg")
    return (*also, sqlite3.Error) if psycopg is None else (*also, sqlite3.Error, psycopg.Error)


class Transaction(abc.ABC):
    """One open transaction; every statement in it commits or rolls back together."""

    dialect: Dialect
    """The SQL of the store it runs on: what picks a statement that differs between them (a
    locking read, ``SELECT ... FOR SHARE``, is PostgreSQL's alone)."""

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run one statement; returns its rows (empty for statements without a result)."""

    @abc.abstractmethod
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each parameter row."""

    @property
    @abc.abstractmethod
    def rowcount(self) -> int:
        """Rows changed by the last ``execute``."""

    @contextmanager
    def savepoint(self, name: str) -> Iterator[None]:
        """A block whose statements go together inside this transaction: released when the block
        ends normally (its rows then commit or roll back with the transaction), rolled back to
        and released when it raises, and the block's exception passes on unchanged; the
        statements before it are kept and the transaction stays usable (on PostgreSQL, the
        rollback also ends the aborted state a refused statement left). Savepoints nest.

        ``name`` is a plain SQL identifier (it is written into the statements); anything else is
        an ``InputError`` before a statement runs. Costs two statements (SAVEPOINT, RELEASE):
        a decision takes one only where something can refuse after writing.

        When the rollback itself fails, the block's exception still passes on: the transaction
        is then one that cannot commit (SQLite refuses the rest of a transaction a full disk or
        a lost lock ended, PostgreSQL an aborted one), and the block's error says why."""
        if not _IDENTIFIER.fullmatch(name):
            raise InputError(
                f"a savepoint name must be an SQL identifier (letters, digits, _), got {quoted(name)}"
            )
        self.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            with suppress(Exception):  # the block's error is the one to report (see above)
                self.execute(f"ROLLBACK TO SAVEPOINT {name}")
                self.execute(f"RELEASE SAVEPOINT {name}")
            raise
        self.execute(f"RELEASE SAVEPOINT {name}")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
"""A savepoint's name: a plain identifier, at most 63 characters (PostgreSQL's limit)."""


class Store(abc.ABC):
    """Persistence shared by every part of agentgate. Thread-safe; fails closed with ``StoreError``."""

    dialect: Dialect
    url: str
    schema: SchemaRecord | None = None
    """What the store's ``agentgate_schema`` recorded as it was opened (``agentgate.store._version``);
    ``None`` for a store that recorded nothing (new, or made before the record existed)."""
    driver_errors: tuple[type[Exception], ...] = ()
    """What a statement in a ``Transaction`` may raise from the database driver (``execute``
    passes the driver's errors on, so that a caller can roll back to a savepoint and go on)."""

    @property
    def schema_version(self) -> int | None:
        """The schema version of the newest agentgate that wrote the store, as it was opened;
        ``None`` for a store that recorded none."""
        return None if self.schema is None else self.schema.newest

    @abc.abstractmethod
    @contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Transaction]:
        """A transaction that commits on normal exit and rolls back on an exception.

        ``immediate`` takes the write lock at the start (SQLite ``BEGIN IMMEDIATE``), so that a
        conditional update never races with a reader that upgrades later.
        """

    @abc.abstractmethod
    def ensure_schema(
        self, name: str, ddl: dict[Dialect, str], *, made: Callable[[Transaction], None] | None = None
    ) -> None:
        """Create one domain's tables if missing; idempotent, safe to call from every process.
        ``made``, when given, runs in the same transaction, after the script, where it created
        the part's tables (none of them was there): what a part new to the store fills in from
        the others as it is made (``store.agent_names``: the names granted before it), so that
        no other process sees the tables without it."""

    @contextmanager
    def within(self, tx: Transaction | None) -> Iterator[Transaction]:
        """``tx`` when the caller has one (its work then commits with the caller's), else a
        transaction of its own that commits on exit."""
        if tx is not None:
            yield tx
        else:
            with self.transaction() as own:
                yield own

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """One statement in its own short transaction."""
        with self.transaction(immediate=False) as tx:
            return tx.execute(sql, params)

    def may_be_committing(self, session: int, tx: Transaction) -> bool:
        """Whether the server process ``session`` (``CommitUnknown.session``: that of a
        connection lost as its COMMIT was sent) may still be in the transaction it was
        committing, read in ``tx``. Once it is not, that transaction is over, committed or
        rolled back, and what it wrote (if anything) is visible to a statement started after
        this one. Here (SQLite, which has no server processes: a commit is this process's own)
        ``False``."""
        return False

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sqlite_name(name: str) -> str:
    """The table or column name ``name`` as SQLite compares it with agentgate's (all lower-case
    ASCII): its ASCII letters in lower case. SQLite folds only those (``AUDIT_LOG`` is
    ``audit_log``, a column ``ENTRY`` is ``entry``); a name holding any other character is kept
    as it is, and matches none of agentgate's."""
    return name.lower() if name.isascii() else name


def tables_held(
    execute: Callable[[str, Sequence[Any]], list[Row]], dialect: Dialect, names: Sequence[str]
) -> set[str]:
    """Which of the tables ``names`` (agentgate's) the store holds, read with ``execute`` (a
    transaction's, or ``Store.query``) without creating any: SQLite's catalog, its names compared
    as SQLite compares them (``COLLATE NOCASE``, ASCII letters in either case alike: a table
    ``AUDIT_LOG`` is the ``audit_log`` agentgate's statements use), PostgreSQL's ``to_regclass``
    (the tables its statements would find on the search path). Every lookup of a table in
    agentgate's SQLite store goes through here or ``sqlite_name``: until review R88 only the open
    compared names so, and a store whose tables were named in upper case read as one without
    them (a read-only opening stood empty tables in for them)."""
    marks = ", ".join("?" for _ in names)
    if dialect == "sqlite":
        sql = f"SELECT name FROM sqlite_master WHERE type = 'table' AND name COLLATE NOCASE IN ({marks})"
        held = {sqlite_name(str(row[0])) for row in execute(sql, tuple(names))}
        return {name for name in names if sqlite_name(name) in held}
    sql = f"SELECT t FROM (VALUES {', '.join('(?)' for _ in names)}) AS n(t) WHERE to_regclass(t) IS NOT NULL"
    return {str(row[0]) for row in execute(sql, tuple(names))}


def add_sqlite_columns(store: Store, table: str, columns: dict[str, str]) -> None:
    """Add to ``table`` of a SQLite ``store`` made before them each of ``columns`` (name -> its
    declaration: type, default, check) it lacks: ``CREATE TABLE IF NOT EXISTS`` keeps an earlier
    table as it was. Read first in a plain read transaction (nothing to add: no write lock), then
    added under the write lock, each checked again (another process may have added it
    meanwhile). ``table`` and ``columns`` are agentgate's own names, never input; a column is
    there in either case, as SQLite compares names (``sqlite_name``: until review R88 a column
    ``ENTRY`` was added again as ``entry``, a duplicate SQLite refused, so every writable opening
    of the store failed)."""

    def missing(tx: Transaction) -> list[str]:
        there = {sqlite_name(str(row[1])) for row in tx.execute(f'PRAGMA table_info("{table}")')}
        return [name for name in columns if sqlite_name(name) not in there]

    with store.transaction(immediate=False) as tx:
        if not missing(tx):
            return
    with store.transaction() as tx:
        for name in missing(tx):
            tx.execute(f'ALTER TABLE "{table}" ADD COLUMN {name} {columns[name]}')
