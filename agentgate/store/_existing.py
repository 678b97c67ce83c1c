"""A store that must already exist: ``open_store(create=False)``.

A service that decides against a store's revocations and budgets must not get a new, empty
store from a mistyped path or database name: its empty revocation list would let a revoked
chain through, and its budgets would start at nothing spent. What is refused (``NoStore``, and
nothing created: no file, no directory, no table): no file at the path, an empty file, a SQLite
file holding tables but none of agentgate's (another application's database), a PostgreSQL
database holding none of agentgate's tables. A SQLite file is read through a read-only
connection before anything opens it as a store, so that another application's database does not
get the change to its header that opening it as a store makes (WAL mode). A SQLite file that
holds no table at all (a store opened but never used) is a store.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path

from agentgate.errors import NoStore
from agentgate.store._base import Store, sqlite_name

NO_PRIVILEGE_HINT = "(its role lacks a right on agentgate's tables: docs/operations.md, PostgreSQL set-up, lists what to grant)"
"""What the store says of a statement its role has no right to run; the command line, which knows
the table, says what to grant in its place (``cli._common.privilege_hint``)."""

STORE_TABLES = (
    "agentgate_agent_names",
    "agentgate_breakers",
    "agentgate_dead_letters",
    "agentgate_grants",
    "agentgate_leases",
    "agentgate_nonces",
    "agentgate_once",
    "agentgate_rate_buckets",
    "agentgate_revocations",
    "agentgate_schema",
    "agentgate_store_parts",
    "approval_asked",
    "approval_calls",
    "approval_counted",
    "approval_grants",
    "approval_votes",
    "approvals",
    "audit_checkpoints",
    "audit_log",
    "audit_nodes",
    "audit_refs",
    "audit_refs_built",
    "audit_repairs",
    "broker_decisions",
    "broker_leases",
    "broker_queue",
    "broker_state",
    "broker_writer",
    "budget_ledger",
    "budget_reservations",
    "quota_usage",
)
"""Every table some part of agentgate creates (``agentgate store init`` makes them all)."""

_INIT = "agentgate store init --store"


def init_command(path: Path) -> str:
    """The command that sets up, or upgrades, the SQLite store at ``path``, ready to paste."""
    return f"{_INIT} {shlex.quote(shown(str(path)))}"


def shown(text: str) -> str:
    """``text`` (a path, a table name) as one line an error may quote: a character that is not
    printable (a line break, an escape, a byte that is not UTF-8) as its backslash escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def refuse_missing_sqlite(path: Path) -> bool:
    """Raise ``NoStore`` when ``path`` names no file (or a symbolic link to none), an empty
    file (``empty_file``), or a SQLite file of another application (``others_tables_only``).
    Whether its tables were read: ``False`` when the file could not be read through a read-only
    connection, or is no regular file (opening it as a store then says why); its tables are then
    to be checked once it is open (``refuse_others_tables``)."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise missing_file(path) from None
    except (OSError, ValueError):
        return False  # unreadable, a loop of links, a NUL: opening it says why
    if empty_file(path):  # SQLite reads an empty file as an empty database
        raise NoStore(
            f"no store at {shown(str(path))}: the file is empty; to set up a new store there: "
            f"{_INIT} {shlex.quote(shown(str(path)))}",
            reason="empty",
        )
    from agentgate.store._sqlite import sqlite_tables_read_only  # it imports this module

    tables = sqlite_tables_read_only(path)
    if tables is None:
        return False
    refuse_others_tables(path, [name for name, _ in tables])
    return True


def missing_file(path: Path) -> NoStore:
    """The ``NoStore`` for ``path``, where there is no file."""
    return NoStore(
        f"no store at {shown(str(path))}: there is no such file, and a store that must exist is "
        f"not created; to set up a new store there: {_INIT} {shlex.quote(shown(str(path)))}",
        reason="missing",
    )


def refuse_others_tables(path: Path, tables: Sequence[str]) -> None:
    """Raise ``NoStore`` when the SQLite file at ``path`` holds ``tables`` (``sqlite_*`` aside)
    and none of agentgate's."""
    if not others_tables_only(tables):
        return
    names = tuple(sorted(name for name in tables if not name.lower().startswith("sqlite_")))
    listed = ", ".join(shown(name) for name in names[:5]) + (", ..." if len(names) > 5 else "")
    raise NoStore(
        f"no store at {shown(str(path))}: it is another application's SQLite database (tables "
        f"{listed}), holding none of agentgate's; name agentgate's store, or set up a new one "
        f"elsewhere: {_INIT} PATH",
        reason="foreign",
        tables=names,
    )


def refuse_empty_database(store: Store, url: str) -> None:
    """Raise ``NoStore`` when the PostgreSQL database of ``store`` holds none of agentgate's
    tables (``holds_a_store``); ``url``: the store's URL as an error may show it (no password)."""
    if holds_a_store(store):
        return
    raise NoStore(
        f"no store in the PostgreSQL database {url}: it holds none of agentgate's tables; check "
        f"the database name, or set up a new store there as the database's owner: {_INIT} URL",
        reason="no_tables",
    )


def holds_a_store(store: Store) -> bool:
    """Whether the PostgreSQL database of ``store`` holds any of agentgate's tables, where its
    statements find them (the search path). A database that holds none is no store: a mistyped
    database name that exists (``postgres``, another service's) would otherwise get every part's
    tables created in it, and answer from their emptiness (``no open approval requests``,
    ``intact: 0 entries``, not revoked)."""
    names = ", ".join(f"'{name}'" for name in STORE_TABLES)  # constants: no value of the caller's
    rows = store.query(
        "SELECT 1 FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'p') "
        f"AND c.relname IN ({names}) AND pg_catalog.pg_table_is_visible(c.oid) LIMIT 1"
    )
    return bool(rows)


def others_tables_only(tables: Sequence[str] | None) -> bool:
    """Whether a SQLite file's ``tables`` (their names) are some, ``sqlite_*`` aside, and none of
    them is agentgate's, in either case (``sqlite_name``): another application's database. Reads
    no part's schema."""
    names = {sqlite_name(name) for name in tables or () if not name.lower().startswith("sqlite_")}
    return bool(names) and not names & set(STORE_TABLES)


def empty_file(path: Path) -> bool:
    """Whether ``path`` is a regular file of 0 bytes with no write-ahead log beside it: a file
    touched, truncated or half copied, never a store (a store's first page is written when it is
    created); the log looked for beside the file ``path`` names, where SQLite keeps it
    (``resolved``: ``path`` may be a symbolic link)."""
    try:
        status = path.stat()
    except OSError:
        return False  # gone or unreadable: opening it says why
    if not stat.S_ISREG(status.st_mode) or status.st_size:
        return False
    try:
        return Path(f"{resolved(path)}-wal").stat().st_size == 0
    except OSError:
        return True  # no write-ahead log


def resolved(path: str | Path) -> str:
    """The file ``path`` names, found as the kernel finds it: absolute, every symbolic link
    followed, and a ``..`` read after the link before it (``link/..`` is the directory above the
    link's target, where ``os.path.abspath`` drops both). What SQLite is given to open, and where
    it keeps the file's ``-wal``, ``-shm`` and ``-journal``: beside the file, not beside a link to
    it. A part that does not exist yet (a store about to be created) is kept as written."""
    return os.path.realpath(path)
