"""The invocation nonce statement that ``Authority.decide`` runs on its own connection of the
PostgreSQL pool (no Gate transaction around it), when it gets no connection (review R60)."""

from __future__ import annotations

import threading
import time

import pytest

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres


def test_a_nonce_that_finds_every_connection_in_use_says_so(postgres_url: str) -> None:
    """Review R60: a nonce statement that got no connection within the pool's wait because all
    of this process's connections were in use failed as "couldn't get a connection after 0.5
    sec", where a transaction says why (busy, unreachable, reopening); it says the same, and
    records nothing."""
    store = PostgresStore(postgres_url, max_size=1, timeout_s=0.5)
    repo = GrantRepository(store)
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transaction() as tx:
            tx.execute("SELECT 1")
            inside.set()
            done.wait(timeout=30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert inside.wait(timeout=30)
        expires = int(time.time()) + 600
        with pytest.raises(StoreError, match="all 1 connections of this process's pool stayed in use"):
            repo.consume_nonce("did:key:zA", "n-1", expires, ["g-1"])
    finally:
        done.set()
        thread.join()
    assert repo.consume_nonce("did:key:zA", "n-1", expires, ["g-1"]) == "fresh"
    repo.close()
    store.close()


def test_a_nonce_refused_by_a_session_that_became_read_only_names_the_cause(postgres_url: str) -> None:
    """Review R60: the nonce statement refused with SQLSTATE 25006 (a failover that left the URL
    on a standby, a session made read only since the store opened) said only "cannot execute
    INSERT in a read-only transaction"; it says the server takes no writes, as a transaction's
    refused write does, and records nothing."""
    store = PostgresStore(postgres_url, max_size=1)
    repo = GrantRepository(store)
    expires = int(time.time()) + 600
    store.query("SET default_transaction_read_only = on")  # the session's, on the only connection
    with pytest.raises(
        StoreError, match=r"cannot record the invocation nonce: the PostgreSQL server at .* takes no writes"
    ):
        repo.consume_nonce("did:key:zA", "n-1", expires, ["g-1"])
    store.query("SET default_transaction_read_only = off")
    assert repo.consume_nonce("did:key:zA", "n-1", expires, ["g-1"]) == "fresh"
    repo.close()
    store.close()
