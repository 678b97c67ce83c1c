"""Review R70: a session whose client stops in the middle of a transaction (its process stopped,
paused in a debugger, cut off by a partition, or gone without the server noticing) held what it
had locked until the server found out: nothing ended an idle transaction
(``idle_in_transaction_session_timeout`` 0) and the server's own keepalives were the operating
system's (about 2 hours). Every Gate write transaction takes the audit append lock first, so every
decision of every process failed as busy after ``lock_timeout`` meanwhile, with nothing in the
error to say which session held it. Each test runs against a real PostgreSQL server."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_store_postgresql_outage import _free_port, _tcp_server

from agentgate.errors import CommitUnknown, StoreError
from agentgate.keys import SigningKey
from agentgate.store import _postgres as pg
from agentgate.store._pgserver import PostgresServer
from agentgate.store._postgres import PostgresStore
from agentgate.store.audit import APPEND_LOCK, AuditLog

pytestmark = pytest.mark.postgres

SESSION_SETTINGS = (
    "idle_in_transaction_session_timeout",
    "tcp_keepalives_idle",
    "tcp_keepalives_interval",
    "tcp_keepalives_count",
    "client_connection_check_interval",
)


@pytest.fixture(scope="module")
def tcp_server() -> Iterator[PostgresServer]:
    """A server reached over TCP too: the server's keepalive settings read as 0 on a unix socket."""
    server = _tcp_server(_free_port())
    try:
        yield server
    finally:
        server.destroy()


def _tcp_url(server: PostgresServer) -> str:
    """A new database of ``server``, as a URL that reaches it over TCP on 127.0.0.1."""
    name = server.create_database().split("?")[0].rsplit("/", 1)[1]
    return f"postgresql://{server.user}@127.0.0.1:{server.port}/{name}"


def _settings(store: PostgresStore) -> dict[str, str]:
    """The session settings of a connection of ``store``'s pool, as the server reads them."""
    rows = store.query(
        "SELECT name, setting FROM pg_catalog.pg_settings WHERE name = ANY(?)", (list(SESSION_SETTINGS),)
    )
    return {str(name): str(setting) for name, setting in rows}


class _Holder:
    """A thread whose transaction on ``store`` takes the audit append lock and then sits idle in
    transaction (its client stopped) until ``release``; what ending its transaction raised is kept."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.pid = 0
        self.raised: BaseException | None = None
        self._holding, self._released = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._hold)
        self._thread.start()
        assert self._holding.wait(timeout=30)

    def _hold(self) -> None:
        try:
            with self.store.transaction() as tx:
                tx.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
                self.pid = int(tx.execute("SELECT pg_backend_pid()")[0][0])
                self._holding.set()
                self._released.wait(timeout=120)
        except BaseException as exc:  # kept for the test to read
            self.raised = exc

    def release(self) -> None:
        self._released.set()
        self._thread.join()


def test_a_session_left_idle_in_transaction_with_the_append_lock_ends_and_decisions_go_on(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: a connection that took the audit append lock and then sat idle in transaction
    (its process stopped) held it until the server noticed its client was gone: another
    process's append failed as busy after ``lock_timeout``, and so did every one after it. Now
    the server ends such a session after ``IDLE_IN_TRANSACTION_TIMEOUT_S`` (1 s here), without
    the test killing it, and the append waiting for the lock goes through."""
    monkeypatch.setattr(pg, "IDLE_IN_TRANSACTION_TIMEOUT_S", 1.0, raising=False)
    monkeypatch.setattr(pg, "LOCK_TIMEOUT_S", 5.0)
    url = postgres_server.create_database()
    key = SigningKey(b"\x71" * 32)
    stopped, decider = PostgresStore(url), PostgresStore(url)
    log = AuditLog(decider, key, origin="r70/idle")
    AuditLog(stopped, key, origin="r70/idle")
    holder = _Holder(stopped)
    try:
        assert log.append({"kind": "allow", "principal": "did:key:zA"}) == 0
    finally:
        holder.release()
    assert isinstance(holder.raised, StoreError), holder.raised
    assert log.append({"kind": "allow", "principal": "did:key:zA"}) == 1
    stopped.close()
    decider.close()


def test_a_transaction_the_server_ended_for_idling_says_nothing_was_written_not_commit_unknown(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: a transaction whose session the server ended for sitting idle in transaction
    failed at its COMMIT as a lost connection (``CommitUnknown``: "the server may have committed
    it"), though the server ended it before the COMMIT was sent: nothing was written, and saying
    so spares the caller a reconciliation. Now a ``StoreError`` that names the bound."""
    monkeypatch.setattr(pg, "IDLE_IN_TRANSACTION_TIMEOUT_S", 0.5, raising=False)
    store = PostgresStore(postgres_server.create_database())
    try:
        with pytest.raises(StoreError) as raised, store.transaction() as tx:
            tx.execute("SELECT 1")
            time.sleep(2)
        assert not isinstance(raised.value, CommitUnknown), raised.value
        said = str(raised.value)
        assert "idle in transaction" in said and "0.5 s" in said and "nothing was written" in said, said
        assert store.query("SELECT 1") == [(1,)]  # the pool replaced the ended connection
    finally:
        store.close()


def test_sessions_get_an_idle_transaction_bound_and_server_keepalives(
    tcp_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: the server's side of a connection kept its defaults: no bound on an idle
    transaction, keepalives after the OS's 2 hours, no check for a vanished client while a
    statement runs. Now each session of the pool gets them (the keepalives as libpq's own,
    ``NETWORK_DEFAULTS``), read back from ``pg_settings``."""
    monkeypatch.setattr(pg, "IDLE_IN_TRANSACTION_TIMEOUT_S", 45.0, raising=False)
    store = PostgresStore(_tcp_url(tcp_server))
    try:
        assert _settings(store) == {
            "idle_in_transaction_session_timeout": "45000",
            "tcp_keepalives_idle": "5",
            "tcp_keepalives_interval": "2",
            "tcp_keepalives_count": "3",
            "client_connection_check_interval": "5000",
        }
    finally:
        store.close()


def test_a_bound_or_keepalive_the_operator_set_is_kept(tcp_server: PostgresServer) -> None:
    """Review R70: a value the database (or server, role, URL) sets is the operator's and is kept;
    agentgate's fill in only what is left at the default."""
    url = _tcp_url(tcp_server)
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(tcp_server.url(), autocommit=True) as conn:
        conn.execute(
            f"ALTER DATABASE {name} SET idle_in_transaction_session_timeout = '7min'; "
            f"ALTER DATABASE {name} SET tcp_keepalives_idle = 60; "
            f"ALTER DATABASE {name} SET client_connection_check_interval = '20s'"
        )
    store = PostgresStore(url)
    try:
        said = _settings(store)
        assert said["idle_in_transaction_session_timeout"] == "420000"
        assert said["tcp_keepalives_idle"] == "60"
        assert said["client_connection_check_interval"] == "20000"
        assert said["tcp_keepalives_count"] == "3"
    finally:
        store.close()


def test_a_busy_error_names_the_session_holding_the_append_lock(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: a decision that waited for the audit append lock past ``lock_timeout`` said only
    that the store was busy: the operator had no way to tell which session held the lock, nor
    that it ends by itself. Now the error names its server process, its state and since when,
    and what ends it."""
    monkeypatch.setattr(pg, "LOCK_TIMEOUT_S", 0.5)
    url = postgres_server.create_database()
    stopped, decider = PostgresStore(url), PostgresStore(url)
    holder = _Holder(stopped)
    try:
        with pytest.raises(StoreError) as raised, decider.transaction() as tx:
            tx.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
    finally:
        holder.release()
    said = str(raised.value)
    assert " is busy: locked by another session" in said, said
    assert f"server process {holder.pid} (idle in transaction since " in said, said
    assert f"pg_terminate_backend({holder.pid})" in said, said
    assert "idle_in_transaction_session_timeout" in said, said
    stopped.close()
    decider.close()


def test_a_role_that_may_not_use_plpgsql_still_gets_its_sessions(postgres_server: Any) -> None:
    """Review R70: the check interval is set where the server's platform may refuse it, without
    PL/pgSQL (a ``DO`` block, tried first, left every connection of a role whose database
    revoked ``USAGE ON LANGUAGE plpgsql`` from ``PUBLIC`` failing: the store could not open).
    Set in a savepoint, the role's sessions get it like any other's."""
    url = postgres_server.create_database()
    role = f"r70_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute("REVOKE USAGE ON LANGUAGE plpgsql FROM PUBLIC")
    store = PostgresStore(url.replace(f"//{postgres_server.user}@", f"//{role}@"))
    try:
        assert _settings(store)["client_connection_check_interval"] == "5000"
    finally:
        store.close()


def test_a_busy_error_read_by_another_role_says_the_holders_state_is_not_visible(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: a role without ``pg_read_all_stats`` sees no state of another role's session
    (``pg_stat_activity`` gives it null): the busy error still names the holder's server process
    and says that its state is not visible, rather than a state it did not read."""
    monkeypatch.setattr(pg, "LOCK_TIMEOUT_S", 0.5)
    url = postgres_server.create_database()
    role = f"r70_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    stopped = PostgresStore(url)
    decider = PostgresStore(url.replace(f"//{postgres_server.user}@", f"//{role}@"))
    holder = _Holder(stopped)
    try:
        with pytest.raises(StoreError) as raised, decider.transaction() as tx:
            tx.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
    finally:
        holder.release()
    said = str(raised.value)
    assert f"server process {holder.pid} (its state not visible to this role)" in said, said
    assert f"pg_terminate_backend({holder.pid})" in said, said
    stopped.close()
    decider.close()
