"""PostgreSQL store: several gateway processes or hosts sharing one authority.

psycopg 3 with a connection pool. Statements use ``?`` placeholders like the SQLite store and
are rewritten to ``%s`` once (and cached). Transactions run at READ COMMITTED (set on every
pooled connection, for its transactions and as its session's default for autocommit statements,
whatever the server's default); the domains that
need serialization (audit appends, budget spends) take row or advisory locks inside their own
statements, documented where they do.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple, NoReturn
from urllib.parse import unquote

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from agentgate._numbers import finite
from agentgate.errors import AuditError, CommitUnknown, InputError, StoreError
from agentgate.store._base import (
    Dialect,
    Row,
    Store,
    Transaction,
    driver_error_line,
    env_setting,
    tables_held,
    unstorable_text,
)
from agentgate.store._existing import NO_PRIVILEGE_HINT, refuse_empty_database
from agentgate.store._sqlite import foreign_table, required_store_columns, tables_of
from agentgate.store._version import (
    VERSION_DDL,
    VERSION_TABLE,
    needs_record,
    record_version,
    recorded_version,
    refuse_newer,
)

IDLE_CHECK_S = 5.0
"""A pooled connection idle for longer is tested before a transaction uses it (``_connection``).
The pool hands out its least recently used connection, so a process deciding less often than
its pool size every ``IDLE_CHECK_S`` pays one round trip per decision; servers, proxies and
firewalls close idle connections after minutes, not seconds."""
RECONNECT_S = 5.0
"""How long the pool tries to reopen one connection (at once, then 1, 3 and 5 s later) before it
gives that try up; a decision that then finds no connection starts another at once. psycopg_pool's
default (5 minutes, the delay doubling each time) left a process refusing decisions for up to as
long again as the outage had lasted, the server back and nothing wrong with this process."""
POOL_SIZE = 8
"""Connections a process's pool holds at most, unless ``AGENTGATE_PG_POOL_SIZE`` (1 to
``MAX_POOL_SIZE``) or the ``max_size`` argument says otherwise: one per decision, approval or
outcome written at once (a gateway serving many calls in parallel may need more)."""
MAX_POOL_SIZE = 1000
POOL_TIMEOUT_S = 10.0
"""How long a transaction waits for a free connection of the pool (and the pool for its first
one) before it fails with ``StoreError``, unless ``AGENTGATE_PG_POOL_TIMEOUT`` (seconds, more
than 0 and at most ``MAX_POOL_TIMEOUT_S``) or the ``timeout_s`` argument says otherwise."""
MAX_POOL_TIMEOUT_S = 3600.0
LOCK_TIMEOUT_S = 10.0
"""How long a statement waits for a lock (the audit append lock, a row) before it fails, unless the
server, database or role sets its own ``lock_timeout``."""
IDLE_IN_TRANSACTION_TIMEOUT_S = 30.0
"""How long the server lets one of agentgate's sessions sit idle inside a transaction before it
ends the session (``idle_in_transaction_session_timeout``), unless the server, database, role or
URL sets one (not 0). A transaction of agentgate's is idle between two of its statements only
while its process does its own work (a decision's signature checks, its policy, building the
next entry: milliseconds; a garbage collection or a loaded host, seconds): 30 s, three times
``LOCK_TIMEOUT_S``, ends only one whose client stopped (SIGSTOP, a debugger, a partition, a
process gone without its host closing the connection). Such a session held the audit append
lock, which every decision transaction takes first, and until review R70 every decision of
every process failed as busy until the server noticed the client gone (its keepalives: the
operating system's, about 2 hours)."""
SERVER_KEEPALIVES = {"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3"}
"""The server's keepalives on each session's socket (seconds, seconds, probes: as libpq's in
``NETWORK_DEFAULTS``), unless the server, database, role or URL sets one: a client whose host
vanished (powered off, cut off) is found in about 11 s, its session ended and what it held
released. The operating system's defaults (the server's ``0``) took about 2 hours. A unix socket
ignores them."""
CLIENT_CHECK_INTERVAL_S = 5.0
"""How often the server checks, while a statement of a session runs, that its client is still
connected (``client_connection_check_interval``, PostgreSQL 14 on, where the server's platform
can tell), unless the server, database, role or URL sets it (not 0): a statement of a client
that went away is cancelled rather than run to its end."""
NETWORK_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
"""libpq parameters every connection to the store gets unless its URL, or the URL's
``pg_service.conf`` service, sets that one itself (``libpq_settings``; docs/operations.md,
PostgreSQL over a network): a server that stops answering without closing
the connection (a firewall that drops, a frozen host, a cable pulled) ends the connection after
about 10 s of silence, where libpq's defaults (keepalives after 2 hours, the kernel's
retransmissions for about 15 minutes) left a decision, or the check of an idle connection,
waiting on the socket for that long. ``tcp_user_timeout`` (milliseconds) bounds data the server
has not acknowledged; the keepalives (seconds) find the silence while a reply is awaited. Both
are TCP's: a unix socket ignores them, and a server process that is stopped while its host's
kernel still acknowledges is found by neither (``LOCK_TIMEOUT_S`` and the pool's wait bound
what waits on it)."""
POOL_CONNECT_TIMEOUT_S = 10
"""How long the pool's attempt to open a connection may take (libpq's ``connect_timeout``), unless
the URL, its service or ``PGCONNECT_TIMEOUT`` sets it: without one, an attempt at a host that does not answer
waited the kernel's retries (minutes) before the pool could try again."""
READ_ONLY_OPTION = "-c default_transaction_read_only=on"
"""The libpq ``options`` that make every transaction of a session read only
(``PostgresStore(read_only=True)``); the server refuses a write in one with SQLSTATE 25006."""
_APPEND_LOCK_HOLDER = (
    "SELECT l.pid, a.state, a.state_change, p.gid, p.prepared FROM pg_catalog.pg_locks l "
    "LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid "
    "LEFT JOIN pg_catalog.pg_locks x ON l.pid IS NULL AND x.pid IS NULL "
    "AND x.locktype = 'transactionid' AND x.virtualtransaction = l.virtualtransaction "
    "LEFT JOIN pg_catalog.pg_prepared_xacts p ON p.transaction = x.transactionid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid AND l.objid = %s::oid "
    "AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_catalog.pg_database "
    "WHERE datname = pg_catalog.current_database()) LIMIT 1"
)
"""The server process that holds the audit append lock (``pg_advisory_xact_lock`` of a bigint:
its high and low 32 bits, ``objsubid`` 1) in this database, its state and since when; or, where
a prepared transaction holds it (``pid`` null: no process of its own), that one's gid and when it
was prepared (found by the lock on its own transaction id, which has the same virtual one)."""
ROLLED_BACK = "the transaction was rolled back, nothing was written"
"""What a ``StoreError`` adds where the server ended the transaction's session before it read the
COMMIT (``PostgresStore._ended_idle``, ``PostgresStore._lost``): nothing of it was written."""
_PLACEHOLDER = re.compile(r"\?")
_PROBE_TIMEOUT_S = 2
"""How long the direct attempt that finds why the pool got no connection may take (seconds)."""
_USER_INFO = re.compile(r"[^:]+://([^?#]*?):([^?#]*)@")
"""A URL's user name and password as written, up to the last ``@`` before the query (a ``/`` in
them is theirs: libpq would end the host there and read the rest as the path)."""
_CREATE_IF_MISSING = re.compile(r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.I)
_CREATES = re.compile(r"\s*CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
"""The table or index a statement run inside a ``DO`` block creates (``diag.internal_query``)."""


@lru_cache(maxsize=512)
def _to_pyformat(sql: str) -> str:
    return _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))


class _PgTransaction(Transaction):
    dialect: Dialect = "postgresql"

    def __init__(self, conn: psycopg.Connection[Any], shown_url: str, read_only: bool = False) -> None:
        self._conn = conn
        self._url = shown_url
        """The store's URL as errors show it."""
        self._read_only = read_only
        self._rowcount = 0
        self.failure: psycopg.Error | None = None
        """The last driver error a statement of this transaction met: what aborted it, when a
        later statement is refused because it is (SQLSTATE 25P02) or the block goes on past it."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        try:
            cursor = self._conn.execute(_to_pyformat(sql), tuple(params))
        except UnicodeEncodeError as exc:  # psycopg encodes before it sends: nothing ran
            raise unstorable_text(exc) from None
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            raise self._refused(exc) from exc
        except psycopg.Error as exc:
            self._failed(exc)
        self._rowcount = cursor.rowcount
        return list(cursor.fetchall()) if cursor.description else []

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cursor:
            try:
                cursor.executemany(_to_pyformat(sql), [tuple(r) for r in rows])
            except UnicodeEncodeError as exc:
                raise unstorable_text(exc) from None
            except psycopg.errors.ReadOnlySqlTransaction as exc:
                raise self._refused(exc) from exc
            except psycopg.Error as exc:
                self._failed(exc)

    def _failed(self, exc: psycopg.Error) -> NoReturn:
        """Raise ``exc``, remembered; or, for a statement refused because an earlier one aborted
        the transaction (SQLSTATE 25P02), a ``StoreError`` naming that earlier one, which a part
        caught and answered in its own way: a decision whose revocation read its role may not run,
        denied, met this recording its denial (until review R82 the audit log's ``current
        transaction is aborted`` alone, hiding the cause and its fix)."""
        aborted_by = self.failure
        if not isinstance(exc, psycopg.errors.InFailedSqlTransaction) or aborted_by is None:
            self.failure = exc
            raise exc
        said = driver_error_line(aborted_by)[:300]
        hint = f" {NO_PRIVILEGE_HINT}" if isinstance(aborted_by, psycopg.errors.InsufficientPrivilege) else ""
        raise StoreError(
            f"a statement on the PostgreSQL store {self._url} failed ({said}), aborting the "
            f"transaction it was part of: nothing was written{hint}"
        ) from aborted_by

    def _refused(self, exc: psycopg.Error) -> StoreError:
        """The ``StoreError`` for a write a read-only session refused: the store open to read
        only, or a server that takes no writes (a standby promoted away from, or a session made
        read only by the server's, database's or role's settings after the store was opened)."""
        said = driver_error_line(exc)
        if self._read_only:
            return StoreError(
                f"the PostgreSQL store {self._url} is open to read only: a statement would have "
                f"written to it ({said}); nothing was written"
            )
        return StoreError(read_only_server(self._url, said))

    @property
    def rowcount(self) -> int:
        return self._rowcount


def pool_settings(max_size: int | None = None, timeout_s: float | None = None) -> tuple[int, float]:
    """The pool's size and wait: the arguments given, else ``AGENTGATE_PG_POOL_SIZE`` and
    ``AGENTGATE_PG_POOL_TIMEOUT``, else ``POOL_SIZE`` and ``POOL_TIMEOUT_S``. Raises
    ``InputError``, naming where a value came from, for a size that is not a whole number from 1
    to ``MAX_POOL_SIZE`` or a wait that is not a number of seconds above 0 and at most
    ``MAX_POOL_TIMEOUT_S``."""
    size_from = "max_size" if max_size is not None else "AGENTGATE_PG_POOL_SIZE"
    if max_size is None:
        max_size = env_setting(size_from, int, POOL_SIZE, "a whole number of connections")
    if type(max_size) is not int or not 1 <= max_size <= MAX_POOL_SIZE:
        raise InputError(
            f"{size_from} must be from 1 to {MAX_POOL_SIZE} connections, got {str(max_size)[:80]}"
        )
    wait_from = "timeout_s" if timeout_s is not None else "AGENTGATE_PG_POOL_TIMEOUT"
    if timeout_s is None:
        timeout_s = env_setting(wait_from, float, POOL_TIMEOUT_S, "a number of seconds")
    if (
        type(timeout_s) not in (int, float)
        or not finite(timeout_s)  # math.isfinite raised OverflowError on 10**400 (until review R84)
        or not 0 < timeout_s <= MAX_POOL_TIMEOUT_S
    ):
        raise InputError(
            f"{wait_from} must be more than 0 and at most {MAX_POOL_TIMEOUT_S:g} seconds, got {str(timeout_s)[:80]}"
        )
    return max_size, float(timeout_s)


class PostgresStore(Store):
    dialect: Dialect = "postgresql"
    driver_errors = (psycopg.Error,)

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int | None = None,
        timeout_s: float | None = None,
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        """A pool of connections to ``url``: ``max_size`` connections at most (else
        ``AGENTGATE_PG_POOL_SIZE``, else ``POOL_SIZE``), a transaction waiting ``timeout_s`` for
        a free one (else ``AGENTGATE_PG_POOL_TIMEOUT``, else ``POOL_TIMEOUT_S``). ``InputError``
        for a size or wait out of range, naming where it came from; ``StoreError`` for a URL
        that does not parse or a server that cannot be reached (nothing is left open), and,
        unless ``create``, ``NoStore`` for a database that holds none of agentgate's tables
        (``agentgate.store._existing``: the parts would otherwise create theirs in it).

        ``read_only`` (with ``create`` false, else ``InputError``): every session is read only
        (``default_transaction_read_only``, set as it starts through libpq's ``options``, after
        those libpq used for the first connection: the URL's own, else its service's, else
        ``PGOPTIONS``; ``target_session_attrs=read-write`` asked for as
        ``primary``), ``ensure_schema`` creates nothing (a part whose tables are missing is
        ``StoreError``), and a statement that would write raises ``StoreError``."""
        if read_only and create:
            raise InputError("a store opened to read only is never created: pass create=False")
        self.read_only = read_only
        max_size, timeout_s = pool_settings(max_size, timeout_s)
        self.url = url
        self._schemas: set[str] = set()
        self._lent = 0  # connections this store took from the pool and has not given back
        self._lent_lock = threading.Lock()
        try:  # at once, rather than after the pool's wait for a connection it can never make
            parsed = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError:  # its message may quote the password: not repeated
            shown = _redact(url)
            unknown = _unknown_parameters(shown)
            named = f" (libpq knows no parameter {', '.join(unknown)})" if unknown else ""
            raise StoreError(f"not a valid PostgreSQL URL: {shown}{named}") from None
        except UnicodeDecodeError:  # psycopg decodes what libpq read: a ``ValueError`` until review R72
            raise StoreError(
                f"not a valid PostgreSQL URL: {_redact(url)} (a percent-escape in it, %XX, is not UTF-8 text)"
            ) from None
        # What libpq connects with besides what agentgate adds: the URL's, else its service's
        # (``pg_service.conf``), else the ``PG*`` variables'. agentgate's defaults fill in only
        # what none of them sets (until review R69 they replaced a service's).
        merged = libpq_settings(url)
        timeout = parsed.get("connect_timeout", merged.get("connect_timeout"))  # the URL's, even empty
        try:  # psycopg waits for a connection itself, for what it is given (a service's unread)
            psycopg.conninfo.timeout_from_conninfo({} if timeout is None else {"connect_timeout": timeout})
        except psycopg.ProgrammingError:
            raise StoreError(
                f"{_timeout_source(parsed, timeout)} must be a number of seconds, got "
                f"{str(timeout)[:40]!r} (PostgreSQL URL {_redact(url)})"
            ) from None
        self._connect_timeout: int | str = POOL_CONNECT_TIMEOUT_S if timeout is None else timeout
        written = _USER_INFO.match(url)
        # A host name never holds an "@" (a socket directory, given as a path, may): one that
        # does is the rest of a password after a user name that ``_USER_INFO`` does not read
        # (one holding a "?" or a "#", which libpq takes as written).
        hosts = [h for h in str(parsed.get("host", "")).split(",") if not h.startswith("/")]
        if (written and unquote(written.group(2)) != parsed.get("password", "")) or any(
            "@" in h for h in hosts
        ):
            # libpq ends the user part at its first "@", and finds none before a "/": the rest
            # of the password, or all of it, became the host, port or database, which its
            # errors quote.
            raise StoreError(
                f"the user name or password of the PostgreSQL URL {_redact(url)} holds an @ or a / that is "
                "not percent-encoded: write them as %40 and %2F (and a : in the user name as %3A)"
            )
        _refuse_tls_on_a_socket(url, parsed)
        self._network: dict[str, Any] = {k: v for k, v in NETWORK_DEFAULTS.items() if k not in merged}
        if read_only:
            # A URL (or its service, or PGTARGETSESSIONATTRS) that asks for a read-write session,
            # to find the primary of several hosts, would find none: this one is read only. The
            # primary is asked for instead (until review R67 every verb that only reads failed
            # there; until review R69 when its service asked).
            target = merged.get("target_session_attrs")
            if target == "read-write":
                self._network["target_session_attrs"] = "primary"
        try:  # one connection first: its error says why (refused, unknown host, password), where
            # the pool would wait 10 s and say only that it could not fill itself
            with psycopg.connect(url, **self._connect_settings()) as first:
                row = first.execute("SELECT current_setting('transaction_read_only')").fetchone()
                used = {o.keyword: o.val for o in first.pgconn.info}
        except psycopg.Error as exc:
            reason = driver_error_line(exc)[:300]
            raise StoreError(f"cannot connect to PostgreSQL at {_redact(url)}: {reason}") from None
        if read_only:  # the session's own options kept (libpq takes the last of one setting)
            # As libpq used them for the first connection: the URL's, else a ``pg_service.conf``
            # service's, else ``PGOPTIONS`` (libpq reads the latter two only for a connection
            # given none: a search path set there was lost to the verbs that only read, until
            # review R67 for ``PGOPTIONS``, R68 for a service's).
            own = (used.get(b"options") or b"").decode(errors="replace").strip()
            self._network["options"] = f"{own} {READ_ONLY_OPTION}".strip()
        if not read_only and row is not None and row[0] == "on":
            raise StoreError(read_only_server(_redact(url), "transaction_read_only is on"))
        self._sizes = (min_size, max_size, timeout_s)
        self.pool = self._open_pool()
        self._pid = os.getpid()
        self._inherited: list[ConnectionPool] = []
        self._fork_lock = threading.Lock()
        try:
            self._refuse_foreign_tables()
            if not create:
                refuse_empty_database(self, _redact(url))
            # Read once, here: a decision never reads it (no round trip more on the hot path).
            with self.transaction(immediate=False) as tx:
                self.schema = recorded_version(tx, "postgresql")
            refuse_newer(_redact(url), self.schema)
        except BaseException:
            self.pool.close()
            raise

    def _refuse_foreign_tables(self) -> None:
        """Raise ``StoreError`` when the database holds, where agentgate's statements find it (the
        search path), a table of one of agentgate's names without a column a row of agentgate's
        must have, or a view of one of them: another application's (its ``audit_log``, say),
        which ``CREATE TABLE IF NOT EXISTS`` would keep, and agentgate's triggers put on it would
        then refuse that application's own inserts, updates and deletes. Checked as the store
        opens, before any part creates its tables, as ``SQLiteStore`` checks a file. Columns an
        upgrade adds have a default or may be null, so a store an earlier version made passes;
        more columns pass."""
        required = required_store_columns()
        rows = self.query(
            "SELECT c.relname, c.relkind, a.attname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a "
            "ON a.attrelid = c.oid WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relname = ANY(?) "
            "AND pg_catalog.pg_table_is_visible(c.oid) AND a.attnum > 0 AND NOT a.attisdropped",
            (sorted(required),),
        )
        columns: dict[str, set[str]] = {}
        for table, kind, column in rows:
            # A view, materialized view or foreign table of agentgate's name is never agentgate's
            # (it makes tables only): read as one without columns, it is refused.
            columns.setdefault(str(table), set()).update((str(column),) if kind in ("r", "p") else ())
        foreign = foreign_table([(t, frozenset(c)) for t, c in sorted(columns.items())], required)
        if foreign is not None:
            raise StoreError(
                f"cannot open the PostgreSQL store {_redact(self.url)}: it holds a table or view "
                f"{foreign[0]} that is not agentgate's (no column {', '.join(foreign[1])}); is it "
                "another application's database? Check --store or AGENTGATE_STORE"
            )

    def _connect_settings(self) -> dict[str, Any]:
        """The libpq parameters a connection to the store gets besides its URL's: ``_network``,
        and ``connect_timeout``: the URL's, else its service's, else ``PGCONNECT_TIMEOUT``, else
        ``POOL_CONNECT_TIMEOUT_S``, given explicitly because psycopg, which waits for the
        connection itself, reads no service (until review R69 a service's was replaced by 10 s).
        The first connection too: until review R67 it was always given 10 s, so a URL's
        ``connect_timeout=2`` (a multi-host URL failing over) waited 10 s per silent host."""
        return {**self._network, "connect_timeout": self._connect_timeout}

    def _open_pool(self) -> ConnectionPool:
        """A new pool of connections to the store, waited for until it holds its first one."""
        min_size, max_size, timeout_s = self._sizes
        try:
            pool = ConnectionPool(
                self.url,
                kwargs=self._connect_settings(),
                min_size=min_size,
                max_size=max_size,
                open=True,
                timeout=timeout_s,
                reconnect_timeout=RECONNECT_S,
                configure=_read_committed,
                reset=_mark_idle,
            )
            pool.wait(timeout=timeout_s)
        except Exception as exc:  # psycopg_pool raises PoolTimeout, psycopg OperationalError...
            raise StoreError(
                f"cannot connect to PostgreSQL at {_redact(self.url)}: {driver_error_line(exc)}"
            ) from exc
        return pool

    def _own_pool(self) -> None:
        """Give a child process (``fork``: multiprocessing's default on Linux, gunicorn's
        ``--preload``) a pool of its own the first time it uses the store. The pool it inherited
        holds the parent's connections, whose sockets are the parent's sessions: used by several
        processes at once, every decision of the children hung (the replies went to whichever
        process read first), and closed here they would end the parent's sessions. So they are
        kept, never used nor closed in the child, and its worker threads (which ``fork`` does not
        copy) and locks (which it copies as they were, perhaps held) are not relied on."""
        if self._pid == os.getpid():
            return
        with self._fork_lock:
            if self._pid == os.getpid():
                return
            self._inherited.append(self.pool)
            self._lent, self._lent_lock = 0, threading.Lock()
            self.pool = self._open_pool()
            self._pid = os.getpid()

    @contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Transaction]:
        """As ``Store.transaction``; every PostgreSQL failure is a ``StoreError`` (see ``recheck``).
        A statement's driver error may be caught inside the block only to roll back to a
        savepoint (``Transaction.savepoint``): a block that goes on past one without it ends in
        ``StoreError``, nothing committed (PostgreSQL aborts the transaction at the error). A
        connection lost before the COMMIT was sent raises ``StoreError`` saying so and that
        nothing was written (``_lost``; an ``AuditError`` in the same words where the audit
        log's statement found it); one lost once the COMMIT was sent raises
        ``CommitUnknown``: the server may have committed (``lost_commit``). An error a part met
        on another connection inside the block (a ``CommitUnknown`` above all) is raised as it
        is."""
        used: psycopg.Connection[Any] | None = None
        session: int | None = None  # the server process of ``used``
        tx: _PgTransaction | None = None
        committing = False
        try:
            with self._connection() as conn:
                used = conn  # before the BEGIN: the first statement a dropped connection fails
                session = conn.pgconn.backend_pid  # libpq's, known at once: no round trip
                with conn.transaction():
                    tx = _PgTransaction(conn, _redact(self.url), self.read_only)
                    yield tx
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                        # A statement failed and the block caught its error outside a savepoint:
                        # the server answers COMMIT with a rollback, and psycopg returns as if
                        # it committed (until review R65 the block's writes were then lost unsaid).
                        said = f" ({driver_error_line(tx.failure)[:300]})" if tx.failure else ""
                        raise StoreError(
                            f"a statement on the PostgreSQL store {_redact(self.url)} failed{said} inside "
                            "a transaction that went on after it: the transaction is aborted; nothing "
                            "was written"
                        )
                    committing = True  # what fails from here on is the COMMIT
        except PoolTimeout as exc:  # a psycopg.Error too: its message alone does not say why
            raise StoreError(self._no_connection()) from exc
        except StoreError as exc:
            if isinstance(exc, CommitUnknown):
                # Another connection's write whose outcome is unknown (an unbound part's own
                # autocommit statement, a nested transaction's COMMIT): its words and type stand.
                raise
            # A part that met the lock inside the block said so in its own words (``cannot read
            # revocations: canceling statement due to lock timeout``): said as the store says it.
            if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                raise self.busy() from exc.__cause__
            if isinstance(exc.__cause__, psycopg.errors.IdleInTransactionSessionTimeout):
                # Likewise a part that met the session the server ended (until review R71 said
                # in the part's words alone, neither why nor that nothing was written).
                recheck(self.pool)
                raise StoreError(self._ended_idle()) from exc.__cause__
            if isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege) and (
                _redact(self.url) not in str(exc)  # not the store's own (``ensure_schema``'s)
            ):
                raise StoreError(self._no_privilege(str(exc))) from exc.__cause__  # in the part's words
            lost = _lost_by_own_statement(exc, used, tx)
            if lost is not None:
                # A lost connection said in a part's words (``cannot record the revocation:
                # terminating connection ...``): said as the store says it (review R92). Never
                # at the COMMIT, which no part runs. Only this transaction's own statement's
                # error: one a part met on another connection, lost with this one, keeps its
                # words (R92's regression review).
                recheck(self.pool)
                raise StoreError(self._lost(driver_error_line(lost))) from lost
            raise
        except AuditError as exc:
            lost = _lost_by_own_statement(exc, used, tx)
            if lost is None:
                raise
            # The audit append's statements say a driver error as an ``AuditError``, the type
            # docs/operations.md gives: a lost connection keeps it, said as the store says it
            # and with the pool's idle connections tested (until review R93 ``audit log: a
            # statement failed: terminating connection ...``, naming no store, no recheck).
            recheck(self.pool)
            raise AuditError(f"audit log: {self._lost(driver_error_line(lost))}") from lost
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise self.busy() from exc
            if isinstance(exc, psycopg.errors.IdleInTransactionSessionTimeout):
                # Sent by the server instead of running what came next, the COMMIT included: it
                # ended the session before it read it, so nothing committed (until review R70 a
                # COMMIT met it as ``CommitUnknown``).
                recheck(self.pool)
                raise StoreError(self._ended_idle()) from exc
            if used is not None and used.broken:
                recheck(self.pool)
                if committing:
                    raise CommitUnknown(
                        lost_commit(_redact(self.url), driver_error_line(exc)), session=session
                    ) from exc
                raise StoreError(self._lost(driver_error_line(exc))) from exc
            if self.read_only and isinstance(exc, psycopg.errors.UndefinedColumn):
                # Opened to read only, a part's tables are not brought up to this version.
                raise StoreError(
                    f"PostgreSQL error: {driver_error_line(exc)[:300]} (a table of an earlier "
                    "version of agentgate, not upgraded where it is read only: run `agentgate store "
                    "init` as the schema's owner; docs/operations.md, Upgrading)"
                ) from exc
            if isinstance(exc, psycopg.errors.InsufficientPrivilege):
                raise StoreError(self._no_privilege(driver_error_line(exc))) from exc
            raise StoreError(f"PostgreSQL error: {driver_error_line(exc)}") from exc

    def _no_privilege(self, said: str) -> str:
        """The refusal of a statement the store's role has no right to run (SQLSTATE 42501):
        a role never granted its rights on agentgate's tables, or granted them before an
        upgrade added one. Until review R73 it was PostgreSQL's words alone, naming no store."""
        return f"PostgreSQL error on the store {_redact(self.url)}: {said[:300]} {NO_PRIVILEGE_HINT}"

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool that works, as far as one can tell: one that sat idle for
        more than ``IDLE_CHECK_S`` (or half the server's ``idle_session_timeout``, when shorter:
        ``_read_committed``) is tested first (one round trip). A server's
        ``idle_session_timeout``, a proxy, a firewall or a load balancer close connections that
        stay idle, and the pool learnt it only from the decision that used one, which failed (a
        deny, or outcomes not recorded) after every quiet spell. A dead one is given back (the
        pool replaces it), the others are tested too (``recheck``) and another is taken. A
        connection in steady use is taken as it is. Raises ``PoolTimeout`` as ``getconn``, and
        ``StoreError`` when a child process cannot open its own pool (``_own_pool``)."""
        self._own_pool()
        held: psycopg.Connection[Any] | None = None
        lent = False
        try:
            # Taken inside the ``try``: until review R93 a Ctrl-C landing between ``getconn`` and
            # it kept the connection from the pool for good (``max_size`` of them, and every
            # transaction waited out its timeout). A window of one assignment remains.
            held = self.pool.getconn()
            with self._lent_lock:
                self._lent += 1
                lent = True
            idle_check_s = getattr(held, "_agentgate_idle_check_s", IDLE_CHECK_S)
            if time.monotonic() - getattr(held, "_agentgate_idle_since", 0.0) > idle_check_s:
                try:
                    ConnectionPool.check_connection(held)
                except psycopg.Error:
                    self.pool.putconn(held)  # broken: the pool discards it and opens another
                    held = None
                    recheck(self.pool)
                    held = self.pool.getconn()
            yield held
        finally:
            if lent:
                with self._lent_lock:
                    self._lent -= 1
            if held is not None:
                self.pool.putconn(held)

    def busy(self) -> StoreError:
        """The ``StoreError`` for a statement that waited for a lock another session held for
        longer than ``lock_timeout`` (SQLSTATE 55P03), wherever it was met: the line the SQLite
        store gives for its write lock (``SQLiteStore.busy``), and the session that holds the
        audit append lock, if one does (``_append_lock_holder``). Until review R64 it was
        PostgreSQL's words alone (``PostgreSQL error: canceling statement due to lock
        timeout``), or a part's prefix before them, and did not name the store; until review
        R70 it did not say which session held the lock, nor how that ends."""
        return StoreError(
            f"the PostgreSQL store {_redact(self.url)} is busy: locked by another session for "
            f"longer than the lock timeout (lock_timeout: {LOCK_TIMEOUT_S:g} s unless the server, "
            "database, role or URL sets one; docs/operations.md); nothing was written: run it "
            f"again once that session is done{self._append_lock_holder()}"
        )

    def _append_lock_holder(self) -> str:
        """What ``busy`` adds about the session that holds the audit append lock, which every
        write transaction of a Gate takes first: its server process, state and since when
        (``pg_locks`` and ``pg_stat_activity``; a state this role may not see is said so), and
        how it ends. Read in one statement on a connection of the pool, only on the error path
        and never waiting more than ``_PROBE_TIMEOUT_S`` for one; empty when no session holds
        it or it cannot be read."""
        from agentgate.store.audit import APPEND_LOCK  # the audit part imports the store's

        try:
            conn = self.pool.getconn(timeout=_PROBE_TIMEOUT_S)
        except psycopg.Error:  # PoolTimeout too: nothing more to say
            return ""
        try:
            row = conn.execute(_APPEND_LOCK_HOLDER, (APPEND_LOCK >> 32, APPEND_LOCK & 0xFFFFFFFF)).fetchone()
        except psycopg.Error:  # a dead connection: the pool replaces it
            row = None
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            self.pool.putconn(conn)
        if row is None:
            return ""
        if row[0] is None:
            return _prepared_holder(row[3], row[4])
        pid, state, since = int(row[0]), row[1], row[2]
        if state is None:  # another role's session, without pg_read_all_stats
            held = f"server process {pid} (its state not visible to this role)"
        else:
            held = f"server process {pid} ({state}{'' if since is None else f' since {since:%Y-%m-%d %H:%M:%S %Z}'})"
        ends = ""
        if state == "idle in transaction":
            ends = (
                "the server ends it after idle_in_transaction_session_timeout "
                f"({IDLE_IN_TRANSACTION_TIMEOUT_S:g} s unless the server, database, role or URL sets one), or "
            )
        return (
            f"; the audit append lock is held by {held}: {ends}end it now with "
            f"SELECT pg_terminate_backend({pid}) if its client is gone"
        )

    def _ended_idle(self) -> str:
        """Why a transaction failed whose session the server ended for sitting idle in it."""
        return (
            f"the PostgreSQL server ended a session of the store {_redact(self.url)} that sat idle in "
            "transaction for longer than idle_in_transaction_session_timeout "
            f"({IDLE_IN_TRANSACTION_TIMEOUT_S:g} s unless the server, database, role or URL sets one; "
            f"docs/operations.md): {ROLLED_BACK}"
        )

    def _lost(self, said: str) -> str:
        """Why a transaction failed whose connection was lost before its COMMIT was sent (a
        DBA's ``pg_terminate_backend``, a server stopped or restarted, a network cut; ``said``:
        libpq's word for it): the server rolls back the transaction of a session that ends.
        Until review R92 it was libpq's words alone (``PostgreSQL error: terminating connection
        due to administrator command``), naming no store nor what was written. Once the COMMIT
        was sent the outcome is not known: ``lost_commit``."""
        return (
            f"the connection to the PostgreSQL store {_redact(self.url)} was lost before the "
            f"transaction committed ({said[:300]}): {ROLLED_BACK}"
        )

    def may_be_committing(self, session: int, tx: Transaction) -> bool:
        """As ``Store.may_be_committing``: while ``pg_stat_activity`` has a row for ``session``
        that is not ``idle`` with no transaction (``backend_xid`` null). A process idle outside
        a transaction has ended the one it was committing (committed or not: final either
        way), though the process lingers (its client's end lost unnoticed: until review R70 the gate waited for it to end, and left the
        decision held after ``OUTCOME_RETRY_FOR_S``). Any other state (``active``: a COMMIT
        awaiting a synchronous standby; ``idle in transaction``: the COMMIT not read yet; a
        state this role may not see, null) may still commit. No row: the process has ended (a
        row of another process given the same pid since is read the same way: at worst a wait)."""
        rows = tx.execute(
            "SELECT state = 'idle' AND backend_xid IS NULL FROM pg_catalog.pg_stat_activity WHERE pid = ?",
            (session,),
        )
        return bool(rows) and rows[0][0] is not True

    def _no_connection(self) -> str:
        """Why the pool found no connection within its timeout, for the ``StoreError``: libpq's
        reason from one direct attempt (the server is down, refuses this role or database more
        connections, ...), or, when that attempt succeeds, that this process's pool stayed busy,
        or that it was still reopening its connections (the server came back during the wait).
        Runs only after the pool gave up, so it costs nothing on a decision that got through."""
        where = f"PostgreSQL at {_redact(self.url)}"
        waited = f"no connection within {self.pool.timeout:g} s"
        lent = self._lent  # as the wait ended, not after the probe
        try:
            psycopg.connect(self.url, connect_timeout=_PROBE_TIMEOUT_S, **self._network).close()
        except psycopg.Error as probe:
            return f"{where} unreachable: {waited}: {' '.join(str(probe).split())[:300]}"
        if lent < self.pool.max_size:
            return f"{where}: {waited}: the pool is still reopening its connections (a direct one succeeds: the server is back)"
        return f"{where}: {waited}: all {self.pool.max_size} connections of this process's pool stayed in use"

    def ensure_schema(
        self, name: str, ddl: dict[Dialect, str], *, made: Callable[[Transaction], None] | None = None
    ) -> None:
        if name in self._schemas:
            return
        if self.read_only:  # nothing created: the part's tables (the same in both dialects) looked for
            wanted = sorted(tables_of(ddl["sqlite"]))
            held = self.query(
                "SELECT t FROM unnest(?::text[]) AS t WHERE to_regclass(t) IS NOT NULL", (wanted,)
            )
            missing = sorted(set(wanted) - {str(row[0]) for row in held})
            if missing:
                raise StoreError(
                    f"the PostgreSQL store {_redact(self.url)} holds no table {', '.join(missing)} "
                    f"({name}), and it is open to read only, so none is created: a part of agentgate "
                    "never used in this store, or one its version did not have (run `agentgate store "
                    "init` as the schema's owner: docs/operations.md, Upgrading)"
                )
            self._schemas.add(name)
            return
        # Advisory lock: two processes creating the same tables at once would otherwise race.
        # A CREATE ... IF NOT EXISTS of a table or index that exists is skipped, not run:
        # PostgreSQL checks the CREATE privilege before it looks, so a role that may only read
        # and write the tables (docs/operations.md, least privilege) could not start otherwise.
        with self.transaction() as tx:
            tx.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (f"agentgate-schema-{name}",))
            # Read again: a newer agentgate may have written since the open.
            recorded = recorded_version(tx, "postgresql")
            refuse_newer(_redact(self.url), recorded)
            new = made is not None and not tables_held(
                tx.execute, "postgresql", sorted(tables_of(ddl["sqlite"]))
            )
            for statement in _split_sql(ddl["postgresql"]):
                creates = _CREATE_IF_MISSING.match(statement)
                if creates and tx.execute("SELECT to_regclass(?)", (creates.group(1),))[0][0] is not None:
                    continue
                try:
                    tx.execute(statement)
                except psycopg.errors.InsufficientPrivilege as exc:
                    # A role without CREATE (least privilege) on a store that lacks what this
                    # version adds: an upgrade whose ``store init`` was not run as the owner.
                    # A DO block creates only what is missing: the statement it ran names the table.
                    creates = creates or _CREATES.match(exc.diag.internal_query or "")
                    what = f"{creates.group(1)} ({name})" if creates else f"a part of the {name} tables"
                    raise StoreError(
                        f"{what} is missing in the PostgreSQL store {_redact(self.url)} and this role "
                        "may not create it: run "
                        "`agentgate store init` as the schema's owner, then grant this role its rights "
                        f"again (docs/operations.md, Upgrading). PostgreSQL said: {driver_error_line(exc)}"
                    ) from exc
                except psycopg.Error as exc:
                    # Anything else (a search path that names no schema there is, a full disk)
                    # said with the part and the store, as SQLite says it: until review R83 the
                    # transaction's ``PostgreSQL error: ...`` named neither. A lock timeout, or a
                    # session the server ended, is still said as such (``transaction``: the cause).
                    raise StoreError(
                        f"cannot create the {name} tables in the PostgreSQL store {_redact(self.url)}: "
                        f"{driver_error_line(exc)}"
                    ) from exc
            if new and made is not None:
                made(tx)
            if needs_record(recorded):
                self._record_version(tx)
        self._schemas.add(name)

    def _record_version(self, tx: Transaction) -> None:
        """Record ``SCHEMA_VERSION`` in ``tx``, the transaction of a part's DDL (creating
        ``agentgate_schema`` where it is missing), under a lock every part's ``ensure_schema``
        takes for it, so that two parts made at once do not both create the table. Skipped for a
        role that may not (the application role of docs/operations.md, which may only read it):
        the owner's ``agentgate store init`` records it; the tables it checked are this version's
        all the same."""
        tx.execute("SELECT pg_advisory_xact_lock(hashtext('agentgate-schema-version'))")
        recorded = recorded_version(tx, "postgresql")
        refuse_newer(_redact(self.url), recorded)
        try:
            with tx.savepoint("agentgate_schema_version"):
                if tx.execute("SELECT to_regclass(?)", (VERSION_TABLE,))[0][0] is None:
                    tx.execute(VERSION_DDL["postgresql"])
                    # Every role reads it as the store opens, one granted rights on a few tables
                    # only (an audit appender) too: a version number is no secret.
                    tx.execute(f"GRANT SELECT ON {VERSION_TABLE} TO PUBLIC")
                record_version(tx, "postgresql", recorded)
        except psycopg.errors.InsufficientPrivilege:
            pass

    def close(self) -> None:
        if self._pid == os.getpid():  # a child that never used the store: the pool is the parent's
            self.pool.close()


def _prepared_holder(gid: object, prepared: object) -> str:
    """What ``busy`` says of a prepared transaction that holds the audit append lock: its gid, when
    it was prepared and how it ends. It has no server process (``pg_locks.pid`` is null, and
    until review R71 reading it as one raised ``TypeError`` instead of the busy error) and no
    timeout ends it: it holds the lock until someone commits or rolls it back. agentgate
    prepares none; a tool's two-phase commit on the same database may."""
    if not isinstance(gid, str):  # ended between the two reads, or hidden: nothing more to say
        return "; the audit append lock is held by a prepared transaction (PREPARE TRANSACTION)"
    quoted = _sql_literal(gid[:200])
    when = f" at {prepared:%Y-%m-%d %H:%M:%S %Z}" if isinstance(prepared, datetime) else ""
    return (
        f"; the audit append lock is held by the prepared transaction {quoted} (prepared{when}, "
        "by a tool's two-phase commit, not agentgate): nothing ends it by itself; once its "
        f"coordinator is known to be gone, end it with ROLLBACK PREPARED {quoted} (or COMMIT PREPARED)"
    )


def _sql_literal(text: str) -> str:
    """``text`` as an SQL string constant, on one line, that PostgreSQL reads back as ``text``
    whatever the session's ``standard_conforming_strings``: ``'...'`` (quotes doubled) where it
    has no backslash and nothing unprintable, else ``E'...'`` with each backslash, quote and
    unprintable character (a line break, a terminal control, a bidirectional override)
    escaped. Until review R71 a quoted gid kept its backslashes and line breaks as they were: a
    suggested command split the one-line error, and with that setting off, pasted, a gid such as
    ``x\\'; ...`` ended the literal early and ran the rest as SQL."""
    if text.isprintable() and "\\" not in text:
        return "'" + text.replace("'", "''") + "'"
    escaped = []
    for char in text:
        if char in "\\'":
            escaped.append("\\" + char)
        elif not char.isprintable():
            escaped.append(f"\\u{ord(char):04X}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08X}")
        else:
            escaped.append(char)
    return "E'" + "".join(escaped) + "'"


_SESSION_READ = (
    "SELECT set_config('default_transaction_isolation', 'read committed', false), "
    "current_setting('lock_timeout'), current_setting('synchronous_commit'), "
    "(SELECT setting FROM pg_catalog.pg_settings WHERE name = 'idle_session_timeout'), "
    "ARRAY(SELECT name FROM pg_catalog.pg_settings WHERE (name IN "
    "('idle_in_transaction_session_timeout', 'client_connection_check_interval') AND setting = '0') "
    "OR (name IN ('tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count') "
    "AND source = 'default'))"
)
"""The one round trip that sets a new session's isolation default and reads what ``_read_committed``
may set: ``lock_timeout``, ``synchronous_commit``, ``idle_session_timeout``, and the names of
the settings of ``IDLE_IN_TRANSACTION_TIMEOUT_S``, ``SERVER_KEEPALIVES`` and
``CLIENT_CHECK_INTERVAL_S`` that nobody set: the two timeouts at 0 (none), the keepalives at
their default source (they read as the operating system's values, 7200 s or so, not as 0; one
set anywhere is kept). A setting the server does not have (before PostgreSQL 14) is not listed."""


def _read_committed(conn: psycopg.Connection[Any]) -> None:
    """Run every transaction of ``conn`` at READ COMMITTED, whatever the server, database or role
    default (``default_transaction_isolation``), an autocommit statement's included: the locks and conditional updates of the audit
    log, the ledger and the quotas are written for it, and at REPEATABLE READ or SERIALIZABLE
    concurrent decisions failed with serialization errors (most of them, under contention).
    A wait for a lock ends after ``LOCK_TIMEOUT_S`` unless the server sets a ``lock_timeout``,
    ``synchronous_commit = off`` is set back on, and a session left idle in a transaction, or
    whose client vanished, is ended by the server (``IDLE_IN_TRANSACTION_TIMEOUT_S``,
    ``SERVER_KEEPALIVES``, ``CLIENT_CHECK_INTERVAL_S``) unless it sets its own."""
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    # The session's default too, for what runs outside a transaction block: psycopg names the
    # level in its BEGIN, and an autocommit statement has none. The unbound nonce statement runs
    # so (store/grants.py, one round trip per decision), and it is one INSERT ... ON CONFLICT DO
    # NOTHING, which READ COMMITTED is what it needs: a key that a concurrent transaction inserted
    # is waited for and then skipped (a replay). At REPEATABLE READ or SERIALIZABLE, a key
    # committed after the statement's snapshot fails it with a serialization error, which the
    # decision read as "the revocation state cannot be read" (until review R57). Set once here,
    # read in the same round trip as the settings below, it costs a decision nothing.
    row = conn.execute(_SESSION_READ).fetchone()
    assert row is not None
    _, lock_timeout, synchronous_commit, idle_session_ms, unset = row
    # A server, database or role whose idle_session_timeout (PostgreSQL 14 on; milliseconds) is
    # shorter than IDLE_CHECK_S ends a pooled session before ``_connection`` would test it: a
    # process deciding more rarely than that failed every decision (until review R67). Such a
    # connection is tested once idle for half of it.
    idle_check_s = IDLE_CHECK_S
    if idle_session_ms is not None and str(idle_session_ms).isdigit() and int(idle_session_ms) > 0:
        idle_check_s = min(IDLE_CHECK_S, int(idle_session_ms) / 2000)
    conn._agentgate_idle_check_s = idle_check_s  # type: ignore[attr-defined]
    settings: dict[str, str] = {}
    # A writer that stops while it holds the audit append lock (SIGSTOP, a pause, a partition that
    # leaves its session open) would otherwise hold every other decision, in every process,
    # without end. One the server, database or role configures (not 0) is kept.
    if lock_timeout == "0":
        settings["lock_timeout"] = f"{round(LOCK_TIMEOUT_S * 1000)}ms"
    # A commit must be durable before agentgate says it happened (an allow runs after it): a
    # session started with synchronous_commit off (libpq's PGOPTIONS='-c synchronous_commit=off',
    # a role's or database's setting) is set back on. Other values (local, remote_*) are kept.
    if synchronous_commit == "off":
        settings["synchronous_commit"] = "on"
    # And the session ends, what it holds released, once its client stopped inside a transaction
    # or vanished (review R70): ``_SESSION_READ`` lists those left at the server's default.
    for name in unset:
        if name == "idle_in_transaction_session_timeout":
            settings[name] = f"{round(IDLE_IN_TRANSACTION_TIMEOUT_S * 1000)}ms"
        elif name in SERVER_KEEPALIVES:
            settings[name] = SERVER_KEEPALIVES[name]
    if settings:
        conn.execute(
            "SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(settings)),
            [value for pair in settings.items() for value in pair],
        )
    if "client_connection_check_interval" in unset:
        # A server whose platform cannot tell a closed connection refuses any value but 0: in a
        # savepoint, so that the refusal undoes nothing else (a ``DO`` block needs PL/pgSQL,
        # which a database may deny a role).
        with contextlib.suppress(psycopg.errors.InvalidParameterValue), conn.transaction():
            conn.execute(
                "SELECT set_config('client_connection_check_interval', %s, false)",
                (f"{round(CLIENT_CHECK_INTERVAL_S * 1000)}ms",),
            )
    conn.commit()
    _mark_idle(conn)  # a new connection may wait in the pool too before it is first used


def read_only_server(shown_url: str, said: str) -> str:
    """Why a store whose server or session takes no writes is refused: ``said`` is PostgreSQL's
    word for it."""
    return (
        f"the PostgreSQL server at {shown_url} takes no writes in this session ({said}): a hot "
        "standby (a replica), or default_transaction_read_only set on for the server, the "
        "database, the role or in the URL's options; agentgate records every decision's nonce, "
        "budget spend and audit entry there: point the store at the primary (nothing was written)"
    )


_TLS_MODES = frozenset({"require", "verify-ca", "verify-full"})
"""The ``sslmode`` values that ask for TLS (``prefer`` and ``allow`` only try it)."""


def _refuse_tls_on_a_socket(url: str, parsed: dict[str, Any]) -> None:
    """Raise ``StoreError`` when ``url`` (``parsed``), or ``PGSSLMODE`` for a URL without
    ``sslmode``, asks for TLS and a host it names is a unix socket (a path, ``@`` an abstract
    one, or none: libpq's default socket directory, unless ``PGHOST`` names one; a host given a
    ``hostaddr`` is reached over TCP). libpq uses no TLS over a socket and connects without it,
    saying nothing: a store meant to be reached over TLS was used in clear (until review R68)."""
    mode = str(parsed.get("sslmode", os.environ.get("PGSSLMODE", "")))
    if mode not in _TLS_MODES:
        return
    hosts = str(parsed.get("host", os.environ.get("PGHOST", ""))).split(",")
    addresses = str(parsed.get("hostaddr", os.environ.get("PGHOSTADDR", ""))).split(",")
    for position, host in enumerate(hosts):
        address = addresses[position] if position < len(addresses) else ""
        if address.strip() or not (host == "" or host.startswith(("/", "@"))):
            continue
        where = "in the URL" if "sslmode" in parsed else "from PGSSLMODE"
        named = f"host {host}" if host else "no host (libpq's default socket directory)"
        raise StoreError(
            f"the PostgreSQL URL {_redact(url)} asks for TLS (sslmode={mode} {where}) but names "
            f"{named}, which is a unix socket: libpq uses no TLS over one and would connect without "
            "it. Name the server's TCP host (host=db.example) to use TLS, or ask for none "
            "(sslmode=prefer, or no sslmode) to use the socket"
        )


def lost_commit(shown_url: str, said: str) -> str:
    """Why a transaction's end is not known: the connection was lost once its COMMIT was sent
    (``said``: libpq's word for it), so the server may have committed it. Until review R68 it
    was libpq's words alone (``PostgreSQL error: consuming input failed: server closed the
    connection unexpectedly``), read as nothing written."""
    return (
        f"the connection to the PostgreSQL store {shown_url} was lost while a transaction "
        f"committed ({said}): the server may have committed it or not, and nothing was retried "
        "(a decision it held is refused; docs/operations.md, A commit whose answer is lost)"
    )


_UNREACHABLE_SSLMODE = "agentgate-settings-only"
"""An ``sslmode`` libpq refuses, which ``libpq_settings`` gives its connection so that it ends
after its settings are read, before any attempt to reach a host."""


def libpq_settings(url: str) -> dict[str, str]:
    """The libpq parameters that a connection to ``url`` would be made with, as libpq merges them:
    the URL's, else those of its ``pg_service.conf`` service (``service=``, else ``PGSERVICE``;
    the file ``PGSERVICEFILE``, else ``~/.pg_service.conf``, else ``PGSYSCONFDIR``'s), else the
    ``PG*`` variables', else libpq's own defaults; a parameter none of them sets is absent.
    libpq reads them itself (``PQconnectStart``, then ``PQconninfo``): psycopg's
    ``conninfo_to_dict`` reads no service. The connection is refused by libpq before it
    reaches any host (``_UNREACHABLE_SSLMODE``): nothing is sent, no name looked up. Empty for
    a service that cannot be read or found, which the store's first connection then reports."""
    probe = psycopg.pq.PGconn.connect_start(
        psycopg.conninfo.make_conninfo(url, sslmode=_UNREACHABLE_SSLMODE).encode()
    )
    try:
        return {
            option.keyword.decode(): option.val.decode(errors="replace")
            for option in probe.info
            if option.val is not None and option.keyword != b"sslmode"
        }
    finally:
        probe.finish()


def _timeout_source(parsed: dict[str, Any], value: object) -> str:
    """Where the ``connect_timeout`` ``value`` of a URL (``parsed``) came from, for an error."""
    if "connect_timeout" in parsed:
        return "the URL's connect_timeout"
    if os.environ.get("PGCONNECT_TIMEOUT") == value:
        return "PGCONNECT_TIMEOUT"
    service = parsed.get("service") or os.environ.get("PGSERVICE", "")
    return f"the service {service}'s connect_timeout"


def _mark_idle(conn: psycopg.Connection[Any]) -> None:
    """Note when ``conn`` went (back) into the pool (the pool's ``reset`` callback, and
    ``_read_committed`` for a new one)."""
    conn._agentgate_idle_since = time.monotonic()  # type: ignore[attr-defined]


def _lost_by_own_statement(
    exc: Exception, used: psycopg.Connection[Any] | None, tx: _PgTransaction | None
) -> psycopg.Error | None:
    """The driver error of a statement of ``PostgresStore.transaction``'s own transaction
    (``tx``, on ``used``) that found the connection lost, where ``exc``, a part's error raised
    inside it, is the part's word for it; else ``None`` (an error a part met on another
    connection among them)."""
    if used is None or not used.broken or tx is None or exc.__cause__ is not tx.failure:
        return None
    return tx.failure


def recheck(pool: ConnectionPool) -> None:
    """Test the pool's idle connections, after one of them was found broken.

    When the server restarts, every idle connection in the pool is dead, and the pool learns it
    only when one is used: each would fail one more decision after the server is back. So one
    broken connection is taken as a sign that the others may be too: ``pool.check()`` tests
    them now (one round trip each) and replaces the dead ones, and only the decision that found
    the first one fails. Costs nothing on the path without errors.
    """
    with contextlib.suppress(psycopg.Error):  # a closed pool: the caller's error stands
        pool.check()


def _split_sql(script: str) -> list[str]:
    """Split a DDL script on ``;`` at line ends, keeping ``$$``-quoted function bodies whole."""
    statements, current, in_body = [], [], False
    for line in script.splitlines():
        current.append(line)
        if line.count("$$") % 2 == 1:
            in_body = not in_body
        if not in_body and line.rstrip().endswith(";"):
            statements.append("\n".join(current).strip())
            current = []
    tail = "\n".join(current).strip()
    if tail:
        statements.append(tail)
    return [s for s in statements if s]


_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""The URL parameters whose value is a secret: the password, and the passphrase of the client's
TLS key."""


def _redact(url: str) -> str:
    """``url`` as an error message may show it: a password, in the user part or as a
    ``password=`` or ``sslpassword=`` parameter, replaced by ``***``. A parameter is named as
    libpq reads its name, percent-decoded (``pass%77ord=`` is ``password=``).

    Masked as libpq reads the URL: the user part runs from ``//`` to the first ``@``, unless a
    ``/`` comes first (then there is none), and a ``?`` or a ``#`` in it is a part of the user
    name or password (``u:abc?password=x@/db`` is the password ``abc?password=x``); the password
    runs from the user part's first ``:``; the query starts at the first ``?`` after the user
    part, and a parameter's value runs to the next ``&`` that starts a parameter libpq knows (a
    ``#`` is a part of it, and so is an ``&`` that starts none: ``password=sec&ret``).

    Where libpq's reading is not what was meant (``_read_as_meant``: it cannot parse the URL, or
    reads a host holding an ``@`` or a port that is not a number, or an ``@`` follows the user
    part before the query: a password holding an ``@``, a ``/`` or a ``?``, ``u:p@ss@host/db``,
    ``u:p/ss@host/db``), what any meant reading would take for a secret is masked as well: the
    parameters after every ``?``, and the URL from its first ``:`` after ``//`` to its last
    ``@``, wherever it is (until review R72 the last outside a secret's value: where every ``@``
    after the password's start lay in one, as some reading of the URL has it, or one after the
    meant one did, the password's start was shown: ``u:p?password=/s@h``, ``u:p@s?password=x@h``).
    So is one where an ``@`` in the query may end the user part as meant (``_meant_user_part_ends``:
    a password holding an ``@`` and a ``?``, what follows that ``@`` read as a URL's hosts), unless
    it is in an application name, whose value is then masked up to it (``worker@host``, common
    there, keeps the host and database shown: review R71): until review R85 libpq's reading was
    taken as meant where its hosts were sane, and the rest of such a password was shown as a
    socket directory (``//:p@?host=h,/ss@``, the host ``h,/ss@``) or as the host before a
    ``password=`` holding the ``@`` (``//u:p@ss?password=x@h``).

    A libpq key=value connection string (no ``://``, an ``=``; ``PostgresStore`` takes one,
    ``open_store`` refuses it) is masked by ``_redact_conninfo``: until review R72 it was shown
    whole, password and all. It is one where no ``scheme://`` starts ``url``, as libpq tells them
    apart: a ``://`` in a value (``password=pa://ss``, ``application_name=http://x``) does not
    make it a URL (until review R72 it did, and the string was shown whole)."""
    if "=" in url and not _URL_SCHEME.match(url.lstrip()):
        return _redact_conninfo(url)
    scheme, slashes, _ = url.partition("://")
    start = len(scheme) + len(slashes) if slashes else 0
    user_part = _LIBPQ_USER_PART.match(url, start) if slashes else None
    after = user_part.end() if user_part else start  # where the host starts
    spans: list[tuple[int, int]] = []
    if user_part is not None and (colon := url.find(":", start, after - 1)) >= 0:
        spans.append((colon + 1, after - 1))
    if user_part is not None:  # a user name holding ``?password=``: as libpq reads it, no secret
        spans += _secret_parameters(url, url.find("?", start, after - 1), after - 1)
    spans += _secret_parameters(url, url.find("?", after))
    ends = _meant_user_part_ends(url, start, after)
    spans += [(begin, at) for key, begin, at in ends if key in _FREE_TEXT_PARAMETERS]
    if any(key not in _FREE_TEXT_PARAMETERS for key, _, _ in ends) or not _read_as_meant(url, start, after):
        for mark in (i for i, char in enumerate(url) if char == "?"):
            spans += _secret_parameters(url, mark, unknown=False)
        colon = url.find(":", start)
        end = url.rfind("@")
        if 0 <= colon < end:
            spans.append((colon + 1, end))
    shown, last = [], 0
    for begin, end in sorted(spans):
        if end > last:
            shown.append(url[last:begin] + "***" if begin > last else "")
            last = end
    return "".join(shown) + url[last:]


_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
"""The ``scheme://`` that starts a URL (``open_store``'s ``_SCHEME``): any scheme, so a URL that
names another (``mysql://``, refused) is masked as a URL too."""


_LIBPQ_USER_PART = re.compile(r"[^@/]*@")
"""The user part of a URL after its ``//``, as libpq reads it: to the first ``@``, unless a ``/``
comes before it (then there is none)."""


_FREE_TEXT_PARAMETERS = frozenset({"application_name", "fallback_application_name"})
"""The URL parameters whose value is free text naming the client, where an ``@`` is common
(``worker@host``): one there is taken as the value's, not as the end of a user part, so the host
and database stay shown (review R71); the value up to it is masked instead (``_redact``)."""
_MEANT_HOSTS = re.compile(
    r"(?:\[[0-9A-Fa-f:.%]*\]|[\w.~%-]*)(?::[0-9]*)?"
    r"(?:,(?:\[[0-9A-Fa-f:.%]*\]|[\w.~%-]*)(?::[0-9]*)?)*(?:[/?]|\Z)"
)
"""What follows the ``@`` that ends a user part as a URL is written: hosts (none, or names of
letters, digits, ``.``, ``-``, ``_``, ``~`` and percent-escapes, or bracketed IPv6 addresses),
each perhaps with a port, then the end of the URL, its path or its query."""


def _meant_user_part_ends(url: str, start: int, after: int) -> list[tuple[str, int, int]]:
    """The ``@`` signs in the query of ``url`` (its host from ``after``) that may end its user
    part (from ``start``) as meant, a password holding an ``@`` and a ``?``, which libpq ends at
    its first ``@``: each written as is (``%40`` ends none) in a parameter's value, after a ``:``
    (without one, that user part holds no password), and followed by what reads as a URL's hosts
    (``_MEANT_HOSTS``: not ``x@y&sslmode=...``, where an ``@`` is a part of a value). Each as the
    parameter's name (percent-decoded), where its value starts, and where the ``@`` is."""
    ends: list[tuple[str, int, int]] = []
    for key, _, begin, part_end in _query_parts(url, url.find("?", after)):
        at = url.find("@", begin, part_end)
        while at >= 0:
            if url.find(":", start, at) >= 0 and _MEANT_HOSTS.match(url, at + 1):
                ends.append((key, begin, at))
            at = url.find("@", at + 1, part_end)
    return ends


def _read_as_meant(url: str, start: int, after: int) -> bool:
    """Whether libpq reads ``url`` (its user part from ``start``, its host from ``after``) as it
    was plainly meant: it parses it, reads no host holding an ``@`` (a socket directory, given as
    a path, may) and no port that is not a number, no ``@`` follows the user part before the
    query (a password holding an ``@`` or a ``/``, or a user part that libpq did not find, would
    leave one), and the user part is not a list of hosts (``_HOST_AND_PORT``) followed by a query
    that holds a secret parameter, before or after that ``@`` (``//h:5432?password=p@ss``,
    which libpq reads as the user ``h``; ``//?application_name=a@b&password=p``, until review
    R72 read as meant, its password shown as a part of the host)."""
    if "@" in url[after:].partition("?")[0]:
        return False
    mark = url.find("?", start, after)
    if _HOST_AND_PORT.fullmatch(url, start, max(mark, start)) and _secret_parameters(
        url, mark, unknown=False
    ):
        return False
    try:
        parsed = psycopg.conninfo.conninfo_to_dict(url)
    except (psycopg.ProgrammingError, UnicodeDecodeError):  # a percent-escape that is not UTF-8
        return False
    hosts = str(parsed.get("host", "")).split(",")
    ports = str(parsed.get("port", "")).split(",")
    return not any("@" in host and not host.startswith("/") for host in hosts) and all(
        port.isdigit() or not port for port in ports
    )


_HOST_AND_PORT = re.compile(
    r"(?:\[[^\]@/?]*\]|[^:@/?,\[\]]*)(?::[0-9]*)?(?:,(?:\[[^\]@/?]*\]|[^:@/?,\[\]]*)(?::[0-9]*)?)*"
)
"""A list of hosts, each a name or a bracketed IPv6 address, perhaps with a port: until review R72
a single name and port only, so ``//h1:1,h2:2?password=p@ss`` and ``//[::1]?password=p@ss``,
which libpq reads as a user part, were taken as read as meant, the end of the password shown."""


def _redact_conninfo(conninfo: str) -> str:
    """``conninfo``, a libpq key=value connection string, as ``_redact`` shows it: the values of
    ``password`` and ``sslpassword`` (any case) replaced by ``***``, read as libpq reads them
    (white space around ``=``, a value in single quotes with ``\\`` escapes, or up to white space
    with them; white space as libpq has it, ``_LIBPQ_SPACE``).

    libpq's own reading (``conninfo_to_dict``) is the judge: where it parses the string and
    reads the same pairs as ``_conninfo_pairs``, the string is shown as written, its secrets
    masked; where it reads other pairs (a NUL, where libpq's C text ends: the pairs after it,
    and the rest of a value holding it, are never read), its own reading is shown, rebuilt, in
    libpq's order, secrets masked. Where it refuses the string, the pairs before the first it
    would not take are shown (a keyword it knows, not a secret); from there all is masked but
    that pair's keyword, if it is one: a keyword it does not know may be a misspelt ``password``
    (``pasword=``), a keyword holding more than letters, digits and ``_`` a URL it was not given
    as one (a space before ``postgresql://``, ``postgresql:/``), and a password holding an
    unquoted space continues past it (``password=ab cd=ef``). Until review R73 all of those were
    shown."""
    pairs, complete = _conninfo_pairs(conninfo)
    try:
        parsed: dict[str, Any] | None = psycopg.conninfo.conninfo_to_dict(conninfo)
    except (psycopg.ProgrammingError, UnicodeDecodeError):
        parsed = None
    if parsed is not None and complete and {pair.key: pair.value for pair in pairs} == parsed:
        return (
            "".join(
                conninfo[pair.start : pair.value_start]
                + ("***" if _is_secret(pair.key) else pair.written(conninfo))
                for pair in pairs
            )
            + conninfo[pairs[-1].end if pairs else 0 :]
        )
    if parsed is not None:
        return psycopg.conninfo.make_conninfo(
            "", **{key: "***" if _is_secret(key) else value for key, value in parsed.items()}
        )
    shown: list[str] = []
    for pair in pairs:
        if pair.key in _libpq_keywords() and not _is_secret(pair.key):
            shown.append(conninfo[pair.start : pair.end])
            continue
        if _PLAIN_KEYWORD.fullmatch(pair.key):
            return "".join(shown) + conninfo[pair.start : pair.value_start] + "***"
        return "".join(shown) + conninfo[pair.start : pair.key_start] + "***"
    rest = conninfo[pairs[-1].end if pairs else 0 :]
    if complete:
        return "".join(shown) + rest
    return "".join(shown) + rest[: len(rest) - len(rest.lstrip(_LIBPQ_SPACE_TEXT))] + "***"


_PLAIN_KEYWORD = re.compile(r"[A-Za-z0-9_]+")
"""A keyword as libpq's are written: one holding anything else is not one mistyped."""


def _is_secret(key: str) -> bool:
    """Whether the value of the parameter ``key`` (any case) is a secret."""
    return key.lower() in _SECRET_PARAMETERS


class _ConninfoPair(NamedTuple):
    """One ``keyword=value`` of a libpq key=value connection string, where it lies in it."""

    start: int
    """Where the white space before its keyword starts."""
    key_start: int
    key: str
    value_start: int
    """Where its value starts, after the ``=`` and any white space."""
    end: int
    """Where its value ends (after its closing quote, if quoted)."""
    value: str
    """The value as libpq reads it: its quotes removed, its escapes undone."""

    def written(self, conninfo: str) -> str:
        """The value as ``conninfo`` writes it."""
        return conninfo[self.value_start : self.end]


def _conninfo_pairs(conninfo: str) -> tuple[list[_ConninfoPair], bool]:
    """The pairs of ``conninfo`` read as libpq's ``conninfo_parse`` reads them, up to where it
    would stop (a keyword without ``=``, a quote not closed), and whether it read to the end."""
    pairs: list[_ConninfoPair] = []
    at, size = 0, len(conninfo)
    while True:
        start = at
        while at < size and conninfo[at] in _LIBPQ_SPACE:
            at += 1
        if at == size:
            return pairs, True
        key_start = at
        while at < size and conninfo[at] not in _LIBPQ_SPACE and conninfo[at] != "=":
            at += 1
        key = conninfo[key_start:at]
        while at < size and conninfo[at] in _LIBPQ_SPACE:
            at += 1
        if not key or at == size or conninfo[at] != "=":
            return pairs, False
        at += 1
        while at < size and conninfo[at] in _LIBPQ_SPACE:
            at += 1
        value_start = at
        quoted = at < size and conninfo[at] == "'"
        at += quoted
        value: list[str] = []
        while at < size and (conninfo[at] != "'" if quoted else conninfo[at] not in _LIBPQ_SPACE):
            if conninfo[at] == "\\":
                at += 1  # the next character, whatever it is, is the value's (none at the end)
            value.append(conninfo[at : at + 1])
            at += 1
        if quoted and at >= size:  # a quote not closed: libpq refuses it
            return pairs, False
        at = min(at + quoted, size)
        pairs.append(_ConninfoPair(start, key_start, key, value_start, at, "".join(value)))


_LIBPQ_SPACE = frozenset(" \t\n\v\f\r")
"""What libpq takes for white space in a key=value string (C's ``isspace``, byte by byte), not
what ``str.isspace`` does, which also has a no-break space, an em space, ``\\x1c``: until
review R72 ``_redact_conninfo`` ended a password there, and showed the rest of it, read as a
parameter (``password=ab\\u00a0cd=ef``)."""
_LIBPQ_SPACE_TEXT = "".join(sorted(_LIBPQ_SPACE))


def _secret_parameters(
    url: str, mark: int, end: int | None = None, *, unknown: bool = True
) -> list[tuple[int, int]]:
    """Where the values of the secret parameters of the query that starts at the ``?`` at
    ``mark`` (none for -1) and runs to ``end`` (else the end) lie in ``url``, and, if
    ``unknown``, those of the parameters libpq does not know (``_masked_as``): not in a query
    only some reading of ``url`` has (``_redact``), where that masked all that followed."""
    spans: list[tuple[int, int]] = []
    run: str | None = None  # what the last parameter's masked value was: "secret", "unknown"
    for key, has_value, value_start, part_end in _query_parts(url, mark, end):
        if (run == "secret" and not (has_value and key in _libpq_keywords())) or (
            run == "unknown" and not has_value
        ):
            spans[-1] = (spans[-1][0], part_end)  # more of the masked value, masked with it
        else:
            # A parameter libpq does not know may be a misspelt password (``pasword=``): its
            # value is masked too, and an ``&`` in it (until review R73 it was shown), its name
            # kept; the next parameter named ends it.
            run = _masked_as(key) if has_value else None
            run = None if run == "unknown" and not unknown else run
            if run is not None:
                spans.append((value_start, part_end))
    return spans


def _query_parts(url: str, mark: int, end: int | None = None) -> Iterator[tuple[str, bool, int, int]]:
    """The parameters of the query that starts at the ``?`` at ``mark`` in ``url`` (none for -1)
    and runs to ``end`` (else the end), split at each ``&``: each as its name (percent-decoded),
    whether an ``=`` follows the name, where its value starts (just past its end where no ``=``
    does) and where it ends. The one reading of a query for ``_secret_parameters`` and
    ``_meant_user_part_ends``: until review R85 each walked it its own way."""
    if mark < 0:
        return
    offset = mark + 1
    for part in url[mark + 1 : end].split("&"):
        name, has_value, _ = part.partition("=")
        yield unquote(name), bool(has_value), offset + len(name) + 1, offset + len(part)
        offset += len(part) + 1


def _masked_as(key: str) -> str | None:
    """Why the value of the URL parameter ``key`` is masked: ``"secret"`` (a password: it runs
    to the next parameter libpq knows, an ``&`` before that being a part of it), ``"unknown"``
    (libpq knows no such parameter: a misspelt password, ``pasword=``, perhaps; it runs to the
    next parameter named), else ``None``."""
    if _is_secret(key):
        return "secret"
    return None if key in _libpq_keywords() else "unknown"


def _unknown_parameters(shown_url: str) -> list[str]:
    """The names of the query parameters that libpq does not know (a misspelt ``sslmod=``) in
    ``shown_url``, a URL as ``_redact`` shows it, for an error: read from that, a name is never a
    part of a password (a password's ``&`` or ``?`` followed by what reads as a parameter is
    masked there with the rest of it). Read after the last ``@`` (the end of the masked user
    part): a parameter before an ``@`` in a query value is not named. A name is one that a
    ``?`` or an ``&`` starts, wherever: the value of a parameter libpq does not know is masked
    up to the next one named, a ``?`` with it (``frob=x/2@/db?host=h``, the rest of a password
    holding an unencoded ``/``: review R73)."""
    unknown: list[str] = []
    for name in _PARAMETER_NAME.findall(shown_url[shown_url.rfind("@") + 1 :]):
        if unquote(name) not in _libpq_keywords():
            unknown.append(repr(name[:40]))
    return unknown


_PARAMETER_NAME = re.compile(r"[?&]([^?&=#]*)=")
"""A URL parameter's name, as ``_unknown_parameters`` finds it."""


@lru_cache(maxsize=1)
def _libpq_keywords() -> frozenset[str]:
    """The parameter names libpq knows (``host``, ``sslmode``, ...)."""
    return frozenset(option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults())
