"""The invocation nonce statement that ``Authority.decide`` runs on its own connection of the
PostgreSQL pool (no Gate transaction around it), meeting a lock another session holds past
``lock_timeout`` (review R67)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres


def _short(url: str) -> str:
    """``url`` with a lock_timeout of 200 ms, set as docs/operations.md says a user sets it."""
    return url + ("&" if "?" in url else "?") + "options=-c%20lock_timeout%3D200ms"


def test_a_nonce_meeting_a_lock_held_past_the_lock_timeout_says_the_store_is_busy(postgres_url: str) -> None:
    """Review R67: a nonce statement that waited past ``lock_timeout`` for a lock another session
    held (a DBA's ``VACUUM FULL`` or ``LOCK TABLE`` of ``agentgate_nonces``) failed as "cannot
    record the invocation nonce: canceling statement due to lock timeout (SQLSTATE 55P03)", where
    a transaction meeting it says, as docs/operations.md promises "wherever it was met", that the
    store is busy, names it and says that nothing was written. It says the same now, and records
    nothing: the same nonce is fresh once the lock is released."""
    store = PostgresStore(_short(postgres_url), max_size=1)
    repo = GrantRepository(store)
    expires = int(time.time()) + 600
    holder: Any = psycopg.connect(postgres_url)
    try:
        holder.execute("LOCK TABLE agentgate_nonces IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreError) as refused:
            repo.consume_nonce("did:key:zA", "n-1", expires, ["g-1"])
    finally:
        holder.rollback()
        holder.close()
    said = str(refused.value)
    assert said.startswith("cannot record the invocation nonce: "), said
    assert " is busy: locked by another session" in said and "lock_timeout" in said, said
    assert "nothing was written" in said and "postgresql://" in said, said
    assert "\n" not in said, said
    assert repo.consume_nonce("did:key:zA", "n-1", expires, ["g-1"]) == "fresh"
    repo.close()
    store.close()
