"""SQLite store: the embedded default. One file, WAL mode, durable commits by default.

``synchronous=FULL`` makes every commit of the audit log and the ledger survive a power loss
(one fsync of the WAL per commit). ``AGENTGATE_SQLITE_SYNCHRONOUS=NORMAL`` trades that for speed:
a committed transaction can then be lost on power failure (never on a process crash), which
docs/operations.md explains. Durable stores checkpoint the WAL every ``DURABLE_WAL_PAGES`` pages. One connection per thread; writers serialize on SQLite's own lock,
which works across processes. Its errors quote SQLite's words through ``driver_error_line``, on
one line, as the PostgreSQL store's do (until review R62 a message of several lines, a trigger's
``RAISE`` text, was quoted as it was).
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from agentgate._paths import make_private_directories, remove_made, unmade_above
from agentgate._shown import shown_path
from agentgate.errors import InputError, MalformedRow, StoreError
from agentgate.store._base import (
    Dialect,
    Row,
    Store,
    Transaction,
    driver_error_line,
    env_setting,
    sqlite_name,
    tables_held,
    unstorable_text,
)
from agentgate.store._existing import (
    init_command,
    missing_file,
    refuse_missing_sqlite,
    refuse_others_tables,
    resolved,
)
from agentgate.store._file_name import sqlite_file_name
from agentgate.store._version import (
    VERSION_DDL,
    VERSION_TABLE,
    record_version,
    recorded_version,
    refuse_newer,
)

_SYNCHRONOUS = {"FULL", "NORMAL", "EXTRA"}
_SYNCING = {"FULL", "EXTRA"}
DURABLE_WAL_PAGES = 200
"""The WAL's checkpoint threshold in pages (SQLite's default is 1000) when every commit is synced.

A commit that appends to the WAL file makes the fsync write the file's new size too; once a
checkpoint has run and the WAL starts over, commits overwrite blocks the file already has and
cost about half as much on this project's disk (docs/operations.md, "Durable commits"). A fresh
WAL (each process's first connection creates one) grows for this many pages before it first
starts over: with 1000, the first ~200 decisions of every process paid the dearer commit. With
fewer pages, checkpoints come more often (each syncs the database file once), so relaxed stores,
which do not sync commits, keep SQLite's default."""
_MAX_IDLE = 8

T = TypeVar("T")


_ENDS_TRANSACTION = frozenset(
    {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_NOMEM}
)
"""Primary result codes after which SQLite may have rolled back the statement or the whole
transaction, and asks for a ROLLBACK (sqlite.org/lang_transaction.html, "Response To Errors
Within A Transaction"): a full disk, an I/O error (a file system remounted read-only), a lock
or memory that ran out. Not one row's fault: a transaction that met one is never committed."""


def _unstorable_integer() -> StoreError:
    """The ``StoreError`` for an integer parameter beyond 64 bits, which sqlite3 refuses with a bare
    ``OverflowError`` before the statement runs (PostgreSQL's driver sends it, and the server
    refuses it as out of range: a ``StoreError`` there too)."""
    return StoreError(
        "an integer value is out of the range a store holds (-2**63 .. 2**63-1): the statement was not run"
    )


class _Connection(sqlite3.Connection):
    """A connection a weak reference can name (``SQLiteStore._made``): one its holder drops is
    closed as before, not kept open for the store to close."""

    def __del__(self) -> None:
        # Closed here when collected, as collecting closed it silently until Python 3.13, which
        # warns (``ResourceWarning: unclosed database``) for a connection collected open: a
        # Gate, store or repository dropped without ``close()`` lets go of its connections by
        # design (docs/operations.md, Python versions), and the program that dropped it could not
        # silence the warning (review R77, the suite on 3.13).
        # No module global here (``contextlib``, ``sqlite3``): at interpreter exit they may be
        # gone before the last connections are collected.
        try:  # noqa: SIM105 (contextlib.suppress is a module global)
            self.close()
        except Exception:
            pass


class _SQLiteTransaction(Transaction):
    dialect: Dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection, read_only: str | None = None) -> None:
        self._conn = conn
        self._read_only = read_only
        """The store's path, when it is open to read only (``SQLiteStore(read_only=True)``)."""
        self._rowcount = 0
        self.failed: sqlite3.Error | None = None
        """The first error of ``_ENDS_TRANSACTION`` a statement met, even one the caller caught."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self._refuse_after_failure()
        try:
            cursor = self._conn.execute(sql, tuple(params))
            rows = cursor.fetchall()
        except (sqlite3.Error, UnicodeEncodeError, OverflowError) as exc:
            self._statement_failed(exc)
            raise
        self._rowcount = cursor.rowcount
        return rows

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._refuse_after_failure()
        try:
            self._conn.executemany(sql, rows)
        except (sqlite3.Error, UnicodeEncodeError, OverflowError) as exc:
            self._statement_failed(exc)
            raise

    def _statement_failed(self, exc: sqlite3.Error | UnicodeEncodeError | OverflowError) -> None:
        """What ``execute`` and ``executemany`` do with their statement's error: raise the store's
        ``StoreError`` for text or an integer SQLite cannot store, or for a write to a store open
        to read only (``_refuse_write``); note any other SQLite error (``_note``) and return, for
        the caller to raise it as it is."""
        if isinstance(exc, sqlite3.Error):
            self._refuse_write(exc)
            self._note(exc)
        elif isinstance(exc, UnicodeEncodeError):
            raise unstorable_text(exc) from None
        else:
            raise _unstorable_integer() from None

    def _refuse_after_failure(self) -> None:
        # SQLite may have rolled the whole transaction back: a statement run now would be a
        # transaction of its own, committed at once, whatever the block does next.
        if self.failed is not None:
            raise StoreError(
                f"the transaction met {driver_error_line(self.failed):.200} and is rolled back; nothing was written"
            )

    def _refuse_write(self, exc: sqlite3.Error) -> None:
        """Raise ``StoreError`` for a statement that would have written to a store open to read
        only, which SQLite refused (``SQLITE_READONLY``): the store's error, not a driver's that a
        caller might catch and go on from as from a row's fault."""
        code = getattr(exc, "sqlite_errorcode", None)
        if self._read_only is not None and code is not None and code & 0xFF == sqlite3.SQLITE_READONLY:
            raise StoreError(
                f"the SQLite store {self._read_only} is open to read only: a statement would have "
                f"written to it ({driver_error_line(exc)}); nothing was written"
            ) from exc

    def _note(self, exc: sqlite3.Error) -> None:
        # An error the sqlite3 module raises itself (a parameter of a type it cannot bind, a
        # closed connection) has no result code: SQLite did not run the statement.
        code = getattr(exc, "sqlite_errorcode", None)
        if self.failed is None and code is not None and code & 0xFF in _ENDS_TRANSACTION:
            self.failed = exc

    @property
    def rowcount(self) -> int:
        return self._rowcount


BUSY_TIMEOUT_S = 30.0
"""How long a connection waits for a lock another connection holds (SQLite's busy timeout) unless
``AGENTGATE_SQLITE_BUSY_TIMEOUT`` says otherwise; also how long opening a connection waits for
the lock that switching a new file to WAL takes."""
_MOST_BUSY_TIMEOUT_S = 86400.0


def busy_timeout_s() -> float:
    """``AGENTGATE_SQLITE_BUSY_TIMEOUT``: seconds (a fraction allowed, 0 to a day) a SQLite
    connection waits for the write lock another process holds before its statement fails;
    ``BUSY_TIMEOUT_S`` when unset. ``InputError`` naming it for anything else (NaN, a negative
    number, an infinity, text): SQLite would read those as no wait, or as one without end."""
    seconds = env_setting("AGENTGATE_SQLITE_BUSY_TIMEOUT", float, BUSY_TIMEOUT_S, "a number of seconds")
    if not 0 <= seconds <= _MOST_BUSY_TIMEOUT_S:  # NaN too
        raise InputError(
            f"AGENTGATE_SQLITE_BUSY_TIMEOUT must be a number of seconds from 0 to "
            f"{_MOST_BUSY_TIMEOUT_S:g}, got {seconds!r}"
        )
    return seconds


def _busy(exc: BaseException | None) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_BUSY`` (any extended code): another connection held
    a lock this one needed for longer than the busy timeout."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.Error) and code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


def _settled(conn: sqlite3.Connection) -> bool:
    """Whether ``conn`` is open and outside a transaction: what the pool may hand out again."""
    try:
        return not conn.in_transaction
    except sqlite3.ProgrammingError:  # closed (a fork inside its transaction)
        return False


def _wal(conn: sqlite3.Connection, wait_s: float) -> None:
    """Put the file in WAL mode. Switching a new file takes an exclusive lock, and SQLite answers
    ``database is locked`` at once, without its busy handler, while another connection holds the
    file (six Gates opening one new file at once: one of them failed to open). Tried again, a
    few milliseconds apart, for up to ``wait_s`` (the busy timeout), as a busy timeout would."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def _refuse_making_above(path: Path) -> None:
    """Raise ``StoreError`` when the store's ``path`` goes up (``..``) out of a directory that
    does not exist (``unmade_above``), its last part included: until review R88 only its
    directory was looked at, so ``open_store("x/new/..")`` made ``x/new``, then refused the path
    as a directory. The directories after the last ``..`` are made as any store's are."""
    above = unmade_above(path)
    if above is not None:
        what = f"the SQLite store {path}" if path.name == ".." else f"the store directory {path.parent}"
        raise StoreError(
            f"cannot create {what}: {above} names no directory (a directory the path goes up out "
            "of with .. is not made); name the store's directory without it"
        )


def _prepare_file(path: Path, *, create: bool = True) -> None:
    """Make sure ``path`` can hold a SQLite store before SQLite opens it.

    Unless ``create`` is false (then a missing file is ``NoStore``, and nothing is created), a
    missing directory, and each missing directory above it, is created with mode 0700 and a
    missing file with mode 0600, whatever the umask (``make_private_directories``; until review
    R89 only the innermost directory was 0700, the ones above it 0777 under umask 000): the store
    holds grant tokens, approval requests and the audit log, and SQLite gives
    its ``-wal``, ``-shm`` and ``-journal`` files the database file's mode (an existing store keeps
    the mode its operator gave it). Directories made here are removed again when the file then
    cannot be created or opened. An existing path that is not a regular file (after following a
    symbolic link) is refused with ``StoreError`` before SQLite opens it: SQLite read a directory
    as "unable to open", a FIFO or a device as a "disk I/O error", and for ``/dev/null`` (or any
    device) it created ``/dev/null-journal`` beside it. Nothing is ever opened for writing here,
    so a store the process may only read is not refused here; SQLite itself then refuses it when
    no ``-shm`` file is there to read the WAL database through and the directory is not
    writable ("attempt to write a readonly database", docs/operations.md). A directory the
    path names before a ``..`` is never created (``_refuse_making_above``)."""
    made = _make_store_directories(path) if create else []
    try:
        _prepare_made_file(path, create=create)
    except BaseException:
        remove_made(made)
        raise


def _make_store_directories(path: Path) -> list[Path]:
    """Make the missing directories of the store file ``path``, each 0700 whatever the umask;
    those made, outermost first. Raises ``StoreError`` when one cannot be made, having removed
    those it made."""
    _refuse_making_above(path)
    try:
        return make_private_directories(path.parent)
    except (FileExistsError, NotADirectoryError):
        raise StoreError(
            f"cannot create the store directory {path.parent}: a part of that path is a file, not a directory"
        ) from None
    except OSError as exc:
        raise StoreError(f"cannot create the store directory {path.parent}: {exc.strerror}") from exc
    except ValueError:  # a NUL byte, or a lone surrogate (UnicodeEncodeError)
        raise _unnamable(path) from None


def _prepare_made_file(path: Path, *, create: bool) -> None:
    """``_prepare_file`` once the directories are there: the file made (``create``) or looked at."""
    try:
        status = os.stat(path)
    except ValueError:  # a NUL byte, or a lone surrogate (UnicodeEncodeError)
        raise _unnamable(path) from None
    except FileNotFoundError:  # a new store (or a symbolic link to a file not made yet)
        if not create:
            raise missing_file(path) from None  # gone since ``refuse_missing_sqlite`` looked
        try:
            status = _create(path)
        except OSError as exc:
            raise StoreError(f"cannot create the SQLite store {path}: {exc.strerror}") from exc
    except OSError as exc:
        raise StoreError(f"cannot open the SQLite store {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(status.st_mode):
        kind = "a directory" if stat.S_ISDIR(status.st_mode) else "not a regular file"
        raise StoreError(
            f"cannot open the SQLite store {path}: it is {kind}; name a database file "
            "(--store or AGENTGATE_STORE)"
        )


def _unnamable(path: Path) -> StoreError:
    """The ``StoreError`` for a store path no file name can hold: until review R89 a lone
    surrogate (``"\\ud800"``, which ``surrogateescape`` does not encode) escaped as a bare
    ``UnicodeEncodeError`` where a directory was to be made, and was called a NUL character where
    the file was looked at."""
    if "\x00" in str(path):
        return StoreError("a store path cannot hold a NUL character")
    return StoreError(
        f"the store path {shown_path(path)} holds a character no file name can hold (a lone surrogate)"
    )


def _create(path: Path) -> os.stat_result:
    """Create the file ``path`` with mode 0600; what is there at the end. Exclusively: a file
    another thread made meanwhile (six Gates opening one new store) is only looked at, never
    opened, since closing a descriptor of it would drop every POSIX lock this process holds on it,
    those of that thread's SQLite connections included."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            return os.stat(path)
        except FileNotFoundError:  # a symbolic link to a file not made yet: made through it
            fd = os.open(path, flags, 0o600)
    try:
        return os.fstat(fd)  # what was opened: another process may have made something else
    finally:
        os.close(fd)


def _statements(script: str) -> list[str]:
    """The statements of the SQL ``script``, one by one (a trigger's body kept whole), without
    the empty ones: ``executescript`` would commit the transaction it runs in first."""
    statements: list[str] = []
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if _CODE.search(_COMMENTS.sub("", pending)):
                statements.append(pending)
            pending = ""
    if _CODE.search(_COMMENTS.sub("", pending.removesuffix(";"))):
        statements.append(pending.removesuffix(";"))  # a last statement without its ``;``
    return statements


_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_CODE = re.compile(r"[^\s;]")
_CREATE_TABLE = re.compile(r"\s*CREATE\s+TABLE\b", re.IGNORECASE)
_CREATED_TABLE = re.compile(r"\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?[\"`]?(\w+)", re.IGNORECASE)
_REQUIRED: dict[str, dict[str, frozenset[str]]] = {}


def _required_columns(ddl: str) -> dict[str, frozenset[str]]:
    """For each table the script ``ddl`` creates, the columns a row of it must have (``NOT NULL``
    without a default, or in the primary key), read by creating its tables in memory."""
    required = _REQUIRED.get(ddl)
    if required is None:
        memory = sqlite3.connect(":memory:")
        try:
            for statement in _statements(ddl):
                if _CREATE_TABLE.match(_COMMENTS.sub("", statement)):
                    memory.execute(statement)
            tables = [
                row[0]
                for row in memory.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
                )
            ]
            required = {
                table: frozenset(
                    row[1]
                    for row in memory.execute(f'PRAGMA table_info("{table}")')
                    if row[5] or (row[3] and row[4] is None)
                )
                for table in tables
            }
        finally:
            memory.close()
        _REQUIRED[ddl] = required
    return required


def read_only_uri(path: str | Path) -> tuple[str, bool]:
    """The URI that opens the SQLite file at ``path`` to read only, and whether it opens it as
    ``immutable``: SQLite then neither writes nor creates anything, and refuses every write
    (``SQLITE_READONLY``).

    ``mode=ro`` reads the file as it is, through SQLite's locks, so that a process writing the
    store meanwhile is seen as it commits; the pages its write-ahead log (``-wal``) holds are
    read, and neither the log nor the file is written (no checkpoint: a read-only connection
    never takes the lock that needs). To read the log SQLite needs its index, ``-shm``: it
    creates or rebuilds that one where the directory allows (the ``-shm`` holds nothing of the
    store's data), and cannot read the log without it in a directory it may not write.

    With neither a ``-wal`` nor a ``-journal`` beside it the file holds every commit (SQLite
    removes a WAL-mode file's ``-wal`` when its last connection closes), and no process has it
    open to write; ``mode=ro`` would then create an empty ``-wal`` and a ``-shm`` beside it and
    leave them (a read-only connection may not remove them), and could not open it at all in a
    directory it may not write (a read-only mount). Such a file is opened ``immutable=1``:
    nothing is created, no lock is taken, and what it holds is read from it alone. That is
    right only while nobody writes it, so ``unchanged_since`` is checked at the end of every
    read (a process that opened it to write since: ``StoreError``, run again).

    Both are looked for beside the file ``path`` names (``resolved``), where SQLite keeps them:
    until review R87 they were looked for beside ``path`` itself, and a store named through a
    symbolic link was read without its write-ahead log (a grant revoked by a running gateway
    shown as not revoked)."""
    absolute = resolved(path)
    quiet = not any(os.path.lexists(f"{absolute}{end}") for end in ("-wal", "-journal"))
    # An empty authority (``file://`` before the path): the path is then read as one whatever it
    # begins with, never as ``file://AUTHORITY/...`` (refused).
    uri = "file://" + urllib.parse.quote(os.fsencode(absolute)) + "?mode=ro"
    return (uri + "&immutable=1", True) if quiet else (uri, False)


def file_state(path: str | Path) -> tuple[int, int, int, int] | None:
    """The device, inode, size and modification time (ns) of the file at ``path``; ``None``
    when there is none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


def unchanged_since(path: str | Path, state: tuple[int, int, int, int] | None) -> bool:
    """Whether the file at ``path``, opened ``immutable`` when it had ``state`` (``file_state``),
    is still as it was then, with no ``-wal`` or ``-journal`` beside it: no process has written it
    since (a writer creates one of those before it writes, and changes the file's time when it
    writes the file itself); both looked for beside the file ``path`` names (``resolved``)."""
    if state is None or file_state(path) != state:
        return False
    return not any(os.path.lexists(f"{resolved(path)}{end}") for end in ("-wal", "-journal"))


def _from_root(path: Path) -> str:
    """``path`` made absolute as text, neither ``..`` nor a link read: a relative path joined to
    the working directory, an absolute one as it is, without asking for the working directory
    (until review R87b a process whose working directory was removed got a bare
    ``FileNotFoundError`` for a store named from the root). ``StoreError`` for a relative path
    when the working directory cannot be found."""
    if path.is_absolute():
        return str(path)
    try:
        return os.path.join(os.getcwd(), path)
    except OSError as exc:
        raise StoreError(
            f"cannot open the SQLite store {shown_path(path)}: the path is relative and the working "
            f"directory cannot be found ({exc.strerror}); name the store by an absolute path, or "
            "run from a directory that exists"
        ) from None


def sqlite_tables_read_only(path: str | Path) -> list[tuple[str, frozenset[str]]] | None:
    """The tables of the SQLite file at ``path`` with their columns, read through a read-only
    connection that changes nothing in it (``read_sqlite_file``); ``None`` when it cannot be read
    so (opening it as a store then says why)."""
    return read_sqlite_file(path, _tables_and_columns_of)


def _tables_and_columns_of(conn: sqlite3.Connection) -> list[tuple[str, frozenset[str]]]:
    return tables_and_columns(lambda sql: conn.execute(sql).fetchall())


def read_sqlite_file(
    path: str | Path, read: Callable[[sqlite3.Connection], T], *, unless_wal: bool = False
) -> T | None:
    """What ``read`` reads from the SQLite file at ``path`` through a read-only connection that
    changes nothing in it; ``None`` when it cannot be read so (``read`` meeting a SQLite error
    too: opening it as a store then says why), and with ``unless_wal`` when the file is in WAL
    mode (every store agentgate opened is; one that is not was made by another application,
    copied without it, or set back by hand). What else ``read`` raises (a refusal) is raised, the
    connection closed.

    Never by opening the file itself: closing any descriptor of a file drops every POSIX lock the
    process holds on it, those of its other SQLite connections included (a Gate's, in the same
    process), and another process's last connection could then take the file as its own."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a FIFO would block the open; _prepare_file refuses what is no file
    except (OSError, ValueError):
        return None
    state = file_state(path)
    # A writer about to open the file (``unless_wal``) removes what ``mode=ro`` leaves beside it
    # as it closes: there the file's journal mode is read, which an immutable opening hides.
    uri, immutable = read_only_uri(path)
    if unless_wal:
        uri, immutable = uri.removesuffix("&immutable=1"), False
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
    except (sqlite3.Error, ValueError):
        return None
    try:
        if unless_wal and str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            return None
        found = read(conn)
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return None if immutable and not unchanged_since(path, state) else found


def tables_and_columns(query: Callable[[str], Sequence[Sequence[Any]]]) -> list[tuple[str, frozenset[str]]]:
    """Each table of a SQLite database with its columns, read by ``query`` (one statement); the
    columns' names as SQLite compares them with agentgate's (``sqlite_name``: a column ``IDX`` is
    the ``idx`` its statements use, which until review R88 was missed, and the table refused as
    another application's)."""
    names = [str(row[0]) for row in query("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return [
        (name, frozenset(sqlite_name(str(row[1])) for row in query(f'PRAGMA table_info("{name}")')))
        for name in names
    ]


def required_store_columns() -> dict[str, frozenset[str]]:
    """Each of agentgate's SQLite tables with the columns a row of it must have (as
    ``SQLiteStore.ensure_schema`` checks them before creating a part's tables)."""
    from agentgate.store import (  # the parts import this module
        approvals,
        audit,
        broker_decisions,
        broker_leases,
        dead_letters,
        grants,
        leases,
        ledger,
        once,
        quotas,
    )
    from agentgate.store.audit._schema import REPAIRS_DDL

    required: dict[str, frozenset[str]] = {}
    for ddl in (
        audit.AUDIT_DDL,
        audit.PARTS_DDL,
        audit.REFS_DDL,
        REPAIRS_DDL,
        grants.GRANTS_DDL,
        approvals.APPROVALS_DDL,
        ledger.LEDGER_DDL,
        quotas.QUOTA_DDL,
        once.ONCE_DDL,
        broker_decisions.DECISIONS_DDL,
        broker_leases.BROKER_DDL,
        dead_letters.SCHEMA,
        leases.SCHEMA,
        VERSION_DDL,
    ):
        required.update(_required_columns(ddl["sqlite"]))
    return required


def tables_of(ddl: str) -> frozenset[str]:
    """The names of the tables the SQLite script ``ddl`` creates (a part's ``*_DDL["sqlite"]``)."""
    return frozenset(_required_columns(ddl))


def foreign_table(
    tables: Sequence[tuple[str, frozenset[str]]], required: dict[str, frozenset[str]]
) -> tuple[str, list[str]] | None:
    """The first of ``tables`` that has the name of one of ``required`` without a column a row
    of it must have, and those columns: another application's table of agentgate's name. Names
    are compared as SQLite compares them, ASCII letters in either case alike (``sqlite_name``):
    until review R87 a table ``AUDIT_LOG`` passed, and the file was switched to WAL mode before a
    part refused it. (PostgreSQL's store passes only tables named exactly as agentgate's: its
    statements' unquoted names are folded to lower case, and a quoted ``"AUDIT_LOG"`` is another
    table.)"""
    for name, columns in tables:
        missing = sorted(required.get(sqlite_name(name), frozenset()) - columns)
        if missing:
            return name, missing
    return None


class SQLiteStore(Store):
    dialect: Dialect = "sqlite"
    driver_errors = (sqlite3.Error,)

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str | None = None,
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        """The store in the file ``path``, created there if missing unless ``create`` is false:
        then a missing or empty file, or another application's SQLite database, is ``NoStore``
        (a ``StoreError``), and nothing is created (``agentgate.store._existing``). Raises
        ``StoreError`` when it cannot be opened, for an unknown ``synchronous``, for a path that
        names a directory (``state/``) or another database's ``-wal``, ``-shm`` or ``-journal``
        (``sqlite_file_name``), nothing created, and for
        ``:memory:``: sqlite3 opens a new, empty database for each connection to that name, gone
        when it closes, so the audit log, budgets and nonces would vanish with the process (an
        invocation replayed after a restart would be fresh).

        ``read_only`` (with ``create`` false, else ``InputError``): the file is opened through
        ``read_only_uri`` and never written, its journal mode left as it is (no switch to WAL
        mode), no table created (``ensure_schema`` only checks that a part's tables are there),
        nothing checkpointed; a statement that would write raises ``StoreError``."""
        if read_only and create:
            raise InputError("a store opened to read only is never created: pass create=False")
        if str(path) == ":memory:":
            raise StoreError(
                "an in-memory SQLite store (:memory:) keeps nothing: name a file (AGENTGATE_STORE=PATH)"
            )
        # Here, not in ``open_store`` alone: until a regression review of R89 a store made in code
        # took a directory's name (a file ``state`` for ``state/``) or another database's ``-wal``,
        # which SQLite deleted, with what was written there, at that database's next write.
        sqlite_file_name(os.fspath(path))
        self.path = Path(path)
        self.url = str(self.path)
        named = _from_root(self.path)  # before anything is created: a relative path may not be
        mode = (synchronous or os.environ.get("AGENTGATE_SQLITE_SYNCHRONOUS", "FULL")).upper()
        if mode not in _SYNCHRONOUS:
            raise StoreError(
                f"AGENTGATE_SQLITE_SYNCHRONOUS must be one of {sorted(_SYNCHRONOUS)}, got {mode!r}"
            )
        self.synchronous = mode
        self.busy_timeout_s = busy_timeout_s()
        self.read_only = read_only
        tables_read = create or refuse_missing_sqlite(self.path)
        _prepare_file(self.path, create=create)
        # Another application's file, and one a newer agentgate wrote, are refused before
        # anything is written in it. Before the first connection switches it to WAL mode, a
        # change to the file's header, when it is not in WAL mode (until review R95 a newer
        # store's version was read only after that switch); read there, a file in WAL mode would
        # get a ``-wal`` and a ``-shm`` beside it that a read-only connection leaves
        # (``read_only_uri``), so such a file is read through the first connection, which
        # changes nothing in it, below.
        tables = None if read_only else read_sqlite_file(self.path, self._refuse_unopenable, unless_wal=True)
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._made: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()
        """Every connection this process opened to the store (``connect``) and still holds."""
        self._pid = os.getpid()
        self._fork_lock = threading.Lock()
        self._closed = False
        self._schemas: set[str] = set()
        self._stand_ins: list[str] = []
        """Open to read only: what creates, in a connection's temporary schema, an empty table of
        a part's that the file does not hold (``_check_schema``)."""
        # Where the file is, whatever the working directory later. ``_named``: the path as given,
        # made absolute without reading ``..`` textually, which ``check_in_place`` looks at (the
        # kernel reads ``link/..`` as the directory above the link's target; ``abspath`` dropped
        # both, and until review R87 SQLite then opened, or created, another file than the one
        # every check had looked at). ``_absolute``: the file it names, every link resolved as
        # the kernel resolves them: what every connection opens, and where SQLite keeps the
        # file's ``-wal``, ``-shm`` and ``-journal``.
        self._named = named
        self._absolute = resolved(self._named)
        self._file: tuple[int, int] | None = None
        # Opened to read only: how (``read_only_uri``, decided once, for every connection), and
        # for an ``immutable`` opening the file as it was, which every read checks it still is.
        quiet = file_state(self._absolute) if read_only else None
        self._uri, immutable = read_only_uri(self._absolute) if read_only else ("", False)
        self._quiet = quiet if immutable else None
        self._release(self._connect())  # fail now, not at the first decision, if the file is unusable
        try:
            if not tables_read:  # could not be read before it was opened: now
                names = self.query("SELECT name FROM sqlite_master WHERE type = 'table'")
                refuse_others_tables(self.path, [str(row[0]) for row in names])
            # Read once, here: a decision never reads it (no statement more on the hot path).
            # This class's own transaction: a subclass's (one that counts them) is not set up yet.
            with SQLiteStore.transaction(self, immediate=False) as tx:
                if not read_only and tables is None:  # in WAL mode, or unreadable before: now
                    held = {
                        sqlite_name(str(row[0]))
                        for row in tx.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                    }
                    # Agentgate's own store (its version record): as before review R83, each part
                    # checks its tables as it creates them (``ensure_schema``), and opening it
                    # imports no part (every verb would load them all, the audit log's Pydantic
                    # models with them: ``required_store_columns``).
                    if held and VERSION_TABLE not in held:  # none: a new store, nothing to refuse
                        self._refuse_foreign_file(tables_and_columns(tx.execute))
                self.schema = recorded_version(tx, "sqlite")
            refuse_newer(str(self.path), self.schema)
        except BaseException:
            self.close()
            raise

    def connect(self, synchronous: str | None = None) -> sqlite3.Connection:
        """A new connection outside the pool, set up as the pool's are (WAL, busy timeout,
        foreign keys), at ``synchronous`` (FULL, NORMAL or EXTRA in any case; default: the
        store's), a syncing one with the durable checkpoint threshold. Raises ``StoreError``, also
        for another ``synchronous`` (SQLite would take an unknown one for NORMAL)."""
        mode = (synchronous or self.synchronous).upper()
        if mode not in _SYNCHRONOUS:
            raise StoreError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, got {synchronous!r}")
        self._leave_inherited()
        if self.read_only:
            return self._connect_read_only()
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self._absolute,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
                factory=_Connection,
            )
            _wal(conn, self.busy_timeout_s)
            conn.execute(f"PRAGMA synchronous={mode}")
            if mode in _SYNCING:
                conn.execute(f"PRAGMA wal_autocheckpoint={DURABLE_WAL_PAGES}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={round(self.busy_timeout_s * 1000)}")
        except sqlite3.Error as exc:
            if conn is not None:  # opened, then refused (no database, locked): closed now, not
                conn.close()  # when collected (until review R77, an open file until then)
            raise self.busy(exc) or StoreError(
                f"cannot open the SQLite store {self.path}: {driver_error_line(exc)}{self._unwritable(exc)}"
            ) from exc
        return self._adopt(conn)

    def _unwritable(self, exc: sqlite3.Error) -> str:
        """What keeps this process from writing the store, to add to SQLite's words when opening it
        to write failed as one that cannot open or write it (``SQLITE_CANTOPEN``,
        ``SQLITE_READONLY``): its directory (where SQLite makes ``-wal`` and ``-shm``) or its file on
        a read-only file system, or not writable by this account; ``""`` when neither is so. Until
        review R67 a read-only file system was SQLite's ``unable to open database file`` alone."""
        if not str(getattr(exc, "sqlite_errorname", "")).startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY")):
            return ""
        absolute = Path(self._absolute)
        directory = str(self.path.parent) if self.path.parent != Path() else "the current directory"
        for shown, place in ((directory, absolute.parent), (str(self.path), absolute)):
            try:
                read_only = bool(os.statvfs(place).f_flag & os.ST_RDONLY)
            except OSError:
                return ""
            if read_only:
                return f" ({shown} is on a read-only file system, and this command writes the store)"
            if not os.access(place, os.W_OK):
                return f" ({shown} may not be written by this account, and this command writes the store)"
        return ""

    def _adopt(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """``conn``, just opened, kept among this process's connections (``_made``) once the file
        it opened is known to be the one at the store's path (``check_in_place``); else closed, and
        ``StoreError``."""
        if self._file is None:
            self._file = self._identity()
        try:
            self.check_in_place()
        except StoreError:
            conn.close()
            raise
        with self._lock:
            self._made.add(conn)
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection of a store open to read only (``read_only_uri``): no pragma that writes,
        ``query_only`` besides ``mode=ro``. Its first read is made here, so that a file SQLite
        cannot read so fails now, saying why."""
        try:
            conn = sqlite3.connect(
                self._uri,
                uri=True,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
                factory=_Connection,
            )
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot open the SQLite store {self.path} to read only: {driver_error_line(exc)}"
            ) from exc
        try:
            conn.execute("PRAGMA query_only=ON")
            conn.execute(f"PRAGMA busy_timeout={round(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA schema_version").fetchone()
        except sqlite3.Error as exc:
            conn.close()
            raise self.busy(exc) or StoreError(self._unreadable(exc)) from exc
        try:
            with self._lock:
                self._stand_in(conn)
        except StoreError:
            conn.close()
            raise
        return self._adopt(conn)

    def _unreadable(self, exc: sqlite3.Error) -> str:
        """Why the store open to read only cannot be read: SQLite's words, and where its
        write-ahead log cannot be read without an index SQLite may not create, what to do."""
        said = f"cannot read the SQLite store {self.path} (opened to read only): {driver_error_line(exc)}"
        wal, shm = Path(f"{self._absolute}-wal"), Path(f"{self._absolute}-shm")
        cannot_open = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CANTOPEN
        if cannot_open and wal.exists() and not shm.exists():
            said += (
                f"; its write-ahead log {wal.name} can be read only through {shm.name}, which is "
                "not there and cannot be created in its directory: copy the files to a directory "
                "that can be written and name the copy (docs/operations.md)"
            )
        return said

    def disconnect(self, conn: sqlite3.Connection) -> None:
        """Close ``conn``, a connection of ``connect``."""
        conn.close()  # first: an interrupt after it leaves nothing open (the write lock, if held)
        with self._lock:
            self._made.discard(conn)

    def _leave_inherited(self) -> None:
        """Close, in a child process (``fork``: multiprocessing's default on Linux, a daemon's
        double fork, gunicorn's ``--preload``), every connection it inherited, before it opens its
        own. SQLite keeps a process's file locks in memory, and a child copies them without
        holding them: its connections, the inherited ones and any it opened beside them (they share
        that memory), took none of the locks that tell another process the write-ahead log is in
        use. Once the parent closed its last connection (or exited), the parent checkpointed the
        log and deleted it, and every commit of the child went into the deleted file: reported
        done, and lost (its nonces, budget spends and audit entries). Closing the inherited
        connections in the child releases only what the child holds; the parent's stay. Not
        thread-safe against the child's own threads before the first call returns, as a fork
        leaves one thread."""
        if self._pid == os.getpid():
            return
        with self._fork_lock:
            if self._pid == os.getpid():
                return
            self._lock = threading.Lock()  # copied as it was: perhaps held by a thread not copied
            inherited, self._made, self._idle = list(self._made), weakref.WeakSet(), []
            for conn in inherited:
                conn.close()
            self._pid = os.getpid()

    def _identity(self) -> tuple[int, int] | None:
        """The device and inode of the file at the store's path; ``None`` when there is none."""
        try:
            status = os.stat(self._named)
        except OSError:
            return None
        return status.st_dev, status.st_ino

    def check_in_place(self) -> None:
        """Raise ``StoreError`` unless the store's path still names the file this store opened.

        SQLite writes on through an open connection to a file that was removed (its directory
        too) or replaced: every commit would succeed into a file that no later process opens,
        and the decisions, budgets, nonces and audit entries in it would be lost with this
        process, while revocations written at the path since are never read. So each commit is
        refused instead, until the process is restarted on a store that is there.
        """
        if self._file is None or self._identity() != self._file:
            raise StoreError(
                f"the SQLite store {self.path} was removed, moved or replaced while in use: nothing "
                "more is written to it; restart the process on the store"
            )
        if self._quiet is not None and not unchanged_since(self._absolute, self._quiet):
            # Read as a file nobody writes (``immutable``), without SQLite's locks: what was read
            # since a writer came may mix two states of it.
            raise StoreError(
                f"the SQLite store {self.path} was opened by a process that writes it while this "
                "one read it as a closed file: what was read may mix two states of it; run the "
                "command again"
            )

    def _connect(self) -> sqlite3.Connection:
        return self.connect()

    def _acquire(self) -> sqlite3.Connection:
        self._leave_inherited()
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _release(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            # One this process did not open (a fork inside its transaction) is closed already.
            if not self._closed and len(self._idle) < _MAX_IDLE and conn in self._made:
                self._idle.append(conn)
                return
        self.disconnect(conn)

    def _put_back(self, conn: sqlite3.Connection, usable: bool) -> None:
        """Return ``conn`` to the pool at the end of a transaction, or close it: where it could not
        roll back (``usable`` false) and where its transaction is still open, as a
        ``KeyboardInterrupt`` (any ``BaseException``) leaves it that stopped the transaction
        before its COMMIT or ROLLBACK ran (just after its BEGIN, in ``check_in_place``, in the
        ROLLBACK of an earlier one). Closing ends that transaction with nothing of it written
        (SQLite rolls back what a closing connection left open) and lets go of the write lock,
        without another statement that a second interrupt could stop half-way; until review R92
        the connection went back to the pool inside it, and every transaction that took it
        failed with ``cannot start a transaction within a transaction``."""
        if usable and _settled(conn):
            self._release(conn)
        else:
            self.disconnect(conn)

    @contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Transaction]:
        """As ``Store.transaction``. A statement's ``sqlite3.Error`` may be caught inside the
        block (the transaction stays usable, as SQLite leaves it); one that leaves the block rolls
        the transaction back and becomes ``StoreError``, like every other store failure. One of
        ``_ENDS_TRANSACTION`` (a full disk) ends the transaction even if caught: every later
        statement of the block raises ``StoreError``, and so does its end, nothing committed.
        A ``KeyboardInterrupt`` (any ``BaseException``) before the COMMIT ran rolls the
        transaction back too; one during the COMMIT, which SQLite runs to its end before Python
        raises it, leaves the transaction committed where the COMMIT succeeded (see
        ``_put_back``)."""
        conn = self._acquire()
        usable = True
        try:
            try:
                conn.execute("BEGIN IMMEDIATE" if immediate and not self.read_only else "BEGIN")
            except sqlite3.Error as exc:
                raise self.busy(exc) or StoreError(
                    f"cannot start a transaction on {self.path}: {driver_error_line(exc)}"
                ) from exc
            tx = _SQLiteTransaction(conn, str(self.path) if self.read_only else None)
            try:
                yield tx
            except BaseException as exc:
                usable = self._rollback(conn)
                if isinstance(exc, StoreError) and (busy := self.busy(exc.__cause__)) is not None:
                    raise busy from exc.__cause__  # a part's words for it: said as the store says it
                if isinstance(exc, sqlite3.Error):
                    raise self.busy(exc) or StoreError(
                        f"SQLite error on {self.path}: {driver_error_line(exc)}{self._not_upgraded(exc)}"
                    ) from exc
                raise
            if tx.failed is not None:
                # Caught inside the block (a savepoint rolled back, the rest went on), but the disk
                # that was full for one statement is full for the transaction: committing the rest
                # would keep a part of what belongs together (outcomes written, others dropped).
                usable = self._rollback(conn)
                raise self.busy(tx.failed) or StoreError(
                    f"SQLite error on {self.path}: {driver_error_line(tx.failed)}; nothing was written"
                ) from tx.failed
            try:
                self.check_in_place()
            except StoreError:
                usable = self._rollback(conn)
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                usable = self._rollback(conn)
                raise self.busy(exc) or StoreError(
                    f"commit failed on {self.path}: {driver_error_line(exc)}"
                ) from exc
        finally:
            self._put_back(conn, usable)

    def busy(self, exc: BaseException | None) -> StoreError | None:
        """The ``StoreError`` for ``exc`` when it is SQLite's ``SQLITE_BUSY`` (``None`` for any
        other error): another process held the store's write lock for longer than the busy
        timeout. One line for wherever a command met it (opening a part's tables, starting a
        transaction, a statement, the commit): until review R64 each said it in SQLite's words
        after its own, ``cannot create the audit tables in PATH: database is locked`` of tables
        that were there among them."""
        if not _busy(exc):
            return None
        return StoreError(
            f"the SQLite store {self.path} is busy: locked by another process (or connection) for "
            f"longer than the busy timeout, {self.busy_timeout_s:g} s (AGENTGATE_SQLITE_BUSY_TIMEOUT); "
            "nothing was written: run it again once that process is done"
        )

    def _not_upgraded(self, exc: sqlite3.Error) -> str:
        """What to add to the error of a statement that met a column missing from a table in a
        store open to read only, whose parts' tables are not brought up to this version: the
        command that upgrades this file (until review R70 ``agentgate store init`` alone, which
        upgrades the default store or ``AGENTGATE_STORE``'s, not one given with ``--store``)."""
        if not self.read_only or "no such column" not in str(exc):
            return ""
        return (
            " (a table of an earlier version of agentgate, not upgraded where it is read only: "
            f"`{init_command(self.path)}` upgrades it; docs/operations.md, Upgrading)"
        )

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> bool:
        """Roll back; whether the connection can be used again (a damaged file may refuse even that)."""
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            return False
        return True

    def ensure_schema(
        self, name: str, ddl: dict[Dialect, str], *, made: Callable[[Transaction], None] | None = None
    ) -> None:
        """As ``Store.ensure_schema``, in one transaction: a script stopped half-way (a full disk)
        leaves nothing, never a table without the triggers that keep it append-only (nor without
        what ``made`` fills in)."""
        if name in self._schemas:
            return
        if self.read_only:
            self._check_schema(name, ddl["sqlite"])
            self._schemas.add(name)
            return
        statements = _statements(ddl["sqlite"])
        conn = self._acquire()
        usable = True
        try:
            conn.execute("BEGIN IMMEDIATE")
            tx = _SQLiteTransaction(conn)
            # Read again under the write lock: a newer agentgate may have written since the open.
            recorded = recorded_version(tx, "sqlite")
            refuse_newer(str(self.path), recorded)
            self._refuse_foreign_tables(conn, name, ddl["sqlite"])
            new = made is not None and not tables_held(tx.execute, "sqlite", sorted(tables_of(ddl["sqlite"])))
            for statement in [VERSION_DDL["sqlite"], *statements]:
                conn.execute(statement)
            if new and made is not None:
                made(tx)
            record_version(tx, "sqlite", recorded)
            conn.execute("COMMIT")
        except (sqlite3.Error, StoreError) as exc:
            usable = not conn.in_transaction or self._rollback(conn)
            if isinstance(exc, StoreError):
                raise
            raise self.busy(exc) or StoreError(
                f"cannot create the {name} tables in {self.path}: {driver_error_line(exc)}"
            ) from exc
        finally:
            self._put_back(conn, usable)
        self._schemas.add(name)

    def _check_schema(self, name: str, ddl: str) -> None:
        """``ensure_schema`` of a store open to read only: creates nothing in it, and raises
        ``StoreError`` for a table of the script ``ddl`` that is another application's. A table
        the file does not hold (a part never used in this store, or one an earlier version did
        not have) is read as empty, as a store that can be written reads it once the part made
        it: an empty table of its name in each connection's own temporary schema, which
        ``query_only`` keeps from being written too (``_stand_in``)."""
        with self.transaction(immediate=False) as tx:
            held = tables_held(tx.execute, "sqlite", sorted(tables_of(ddl)))
            self._refuse_foreign_tables(tx, name, ddl)
        missing = tables_of(ddl) - held
        if not missing:
            return
        statements = [
            _CREATE_TABLE.sub("CREATE TEMP TABLE", bare, count=1)
            for statement in _statements(ddl)
            if (created := _CREATED_TABLE.match(bare := _COMMENTS.sub("", statement)))
            and created.group(1) in missing
        ]
        with self._lock:
            self._stand_ins.extend(statements)
            made = list(self._made)
        for conn in made:
            self._stand_in(conn)

    def _stand_in(self, conn: sqlite3.Connection) -> None:
        """Create in ``conn``'s temporary schema the empty tables of ``_stand_ins`` it lacks."""
        done = getattr(conn, "_agentgate_stand_ins", 0)
        for statement in self._stand_ins[done:]:
            try:
                conn.execute("PRAGMA query_only=OFF")
                conn.execute(statement)
            except sqlite3.Error as exc:
                raise StoreError(
                    f"cannot read the SQLite store {self.path}: {driver_error_line(exc)}"
                ) from exc
            finally:
                conn.execute("PRAGMA query_only=ON")
        conn._agentgate_stand_ins = len(self._stand_ins)  # type: ignore[attr-defined]

    def _foreign(self, table: str, missing: list[str], doing: str) -> StoreError:
        return StoreError(
            f"cannot {doing} {self.path}: it holds a table {table} that is not agentgate's (no "
            f"column {', '.join(missing)}); is it another application's database? Check --store "
            "or AGENTGATE_STORE"
        )

    def _refuse_unopenable(self, conn: sqlite3.Connection) -> list[tuple[str, frozenset[str]]]:
        """The tables of the file (with their columns) that ``conn``, a read-only connection made
        before the first writable one, reads; ``NewerStore`` or ``MalformedRow`` for the version
        row (``refuse_newer``) of a file that holds one, then ``StoreError`` when a table is
        another application's (``_refuse_foreign_file``). The version first, as a file in WAL mode
        is refused below: a newer agentgate's table of another layout is no other application's
        (until R95's regression review such a file not in WAL mode was called one). Only a version
        table with agentgate's columns (``id``, ``version``) is read, and a version that is not a
        number is refused as malformed only when no table is another application's: until review
        R96 a version table without them failed the read, which skipped every refusal, so the
        other application's file was switched to WAL before ``no such column: version``."""
        tables = _tables_and_columns_of(conn)
        if any(
            sqlite_name(name) == VERSION_TABLE and {"id", "version"} <= {sqlite_name(c) for c in columns}
            for name, columns in tables
        ):
            try:
                refuse_newer(str(self.path), recorded_version(_SQLiteTransaction(conn), "sqlite"))
            except MalformedRow:
                self._refuse_foreign_file(tables)  # another application's file: say that first
                raise
        if tables:  # none in a new file: nothing to refuse, and no part imported to say so
            self._refuse_foreign_file(tables)
        return tables

    def _refuse_foreign_file(self, tables: Sequence[tuple[str, frozenset[str]]]) -> None:
        """Raise ``StoreError`` when ``tables`` (the file's, with their columns) hold a table of
        one of agentgate's names without a column a row of it must have, whichever part's."""
        foreign = foreign_table(tables, required_store_columns())
        if foreign is not None:
            raise self._foreign(foreign[0], foreign[1], "open the SQLite store")

    def _refuse_foreign_tables(self, conn: sqlite3.Connection | Transaction, name: str, ddl: str) -> None:
        """Raise ``StoreError`` when a table the script ``ddl`` creates exists in the file without
        a column the script gives it that a row must have (``NOT NULL`` without a default, or the
        primary key): another application's table of the same name (its ``audit_log``, say),
        which ``CREATE TABLE IF NOT EXISTS`` would keep, and agentgate's triggers would then be
        put on. A column an upgrade adds (``ALTER TABLE ... ADD COLUMN``) has a default or may be
        null, so a store made by an earlier version passes; columns beyond those are allowed.
        A column's name is compared as SQLite compares it (``sqlite_name``)."""
        for table, required in _required_columns(ddl).items():
            have = {sqlite_name(str(row[1])) for row in conn.execute(f'PRAGMA table_info("{table}")')}
            missing = sorted(required - have)
            if have and missing:
                raise self._foreign(table, missing, f"create the {name} tables in")

    def close(self) -> None:
        self._leave_inherited()
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._made.difference_update(idle)
        for conn in idle:
            conn.close()
