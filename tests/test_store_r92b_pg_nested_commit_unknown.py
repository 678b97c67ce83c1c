"""A ``CommitUnknown`` a part met on another connection inside a transaction whose own
connection was lost too keeps its type and words: only the transaction's own statement's error
is said as its lost connection (R92's regression review), on the session's real PostgreSQL
server."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentgate.errors import CommitUnknown, StoreError
from agentgate.store._postgres import PostgresStore
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres


def _terminate_all(store: PostgresStore) -> None:
    """End every session of the store's database but this one, as a server restart does, and
    wait until they have ended."""
    with psycopg.connect(store.url, autocommit=True) as admin:
        others = "datname = current_database() AND pid <> pg_backend_pid()"
        admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {others}")
        for _ in range(100_000):
            if admin.execute(f"SELECT count(*) FROM pg_stat_activity WHERE {others}").fetchone() == (0,):
                return
    pytest.fail("the store's sessions never ended")


def test_a_commit_unknown_from_another_connection_is_not_said_as_nothing_written(
    postgres_server: Any,
) -> None:
    """An unbound ``GrantRepository.consume_nonce`` records the nonce in an autocommit statement
    of its own, on another pooled connection; lost there, the nonce may be recorded or not
    (``CommitUnknown``: sign the call afresh). With the block's own connection lost too, the
    store said it as its own lost connection: a plain ``StoreError``, "nothing was written"."""
    store = PostgresStore(postgres_server.create_database())
    repo = GrantRepository(store)
    try:
        with store.transaction() as first, store.transaction() as second:  # two pooled connections
            first.execute("SELECT 1")
            second.execute("SELECT 1")
        with pytest.raises(StoreError) as raised, store.transaction() as tx:
            tx.execute("SELECT 1")
            _terminate_all(store)
            repo.consume_nonce("p" * 64, "n1", 2_000_000_000, ["a" * 64])
        said = str(raised.value)
        assert isinstance(raised.value, CommitUnknown), said
        assert said.startswith("cannot record the invocation nonce"), said
        assert "sign the call afresh" in said and "nothing was written" not in said, said
    finally:
        repo.close()
        store.close()
