"""The PostgreSQL busy error names a prepared transaction that holds the audit append lock
(review R71), on a real server that allows prepared transactions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from test_store_postgresql_outage import _free_port

from agentgate.errors import StoreError
from agentgate.store import _postgres as pg
from agentgate.store._pgserver import PostgresServer
from agentgate.store._postgres import PostgresStore
from agentgate.store.audit import APPEND_LOCK

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def preparing_server() -> Iterator[PostgresServer]:
    """A throwaway server with ``max_prepared_transactions`` above 0 (the suite's has 0, the
    default, and the setting takes a restart)."""
    server = PostgresServer(_free_port(), fsync=False)
    server.init()
    with open(server.data / "postgresql.conf", "a") as conf:
        conf.write("max_prepared_transactions = 4\n")
    server.start()
    try:
        yield server
    finally:
        server.destroy()


def test_a_busy_error_names_a_prepared_transaction_holding_the_append_lock(
    preparing_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: the busy error read the holder's server process from ``pg_locks.pid``, which is
    null for a prepared transaction (an operator's tool's two-phase commit): ``int(None)`` raised
    a ``TypeError`` traceback where the error should have said the store was busy. Now it names
    the prepared transaction by its gid and says how that ends (no server process to end)."""
    monkeypatch.setattr(pg, "LOCK_TIMEOUT_S", 0.5)
    url = preparing_server.create_database()
    gid = f"tool-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url) as tool:
        tool.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
        tool.execute(f"PREPARE TRANSACTION '{gid}'")
    store = PostgresStore(url)
    try:
        with pytest.raises(StoreError) as raised, store.transaction() as tx:
            tx.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
    finally:
        with psycopg.connect(url, autocommit=True) as tool:
            tool.execute(f"ROLLBACK PREPARED '{gid}'")
        store.close()
    said = str(raised.value)
    assert " is busy: locked by another session" in said, said
    assert f"the audit append lock is held by the prepared transaction '{gid}'" in said, said
    assert f"ROLLBACK PREPARED '{gid}'" in said, said
    assert "pg_terminate_backend" not in said, said
