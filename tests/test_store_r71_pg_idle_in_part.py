"""A transaction whose session the server ended for idling says so whichever statement met it
(review R71), on the session's real PostgreSQL server."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agentgate.errors import CommitUnknown, StoreError
from agentgate.store import _postgres as pg
from agentgate.store._postgres import PostgresStore
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres


def test_a_part_that_meets_the_ended_session_says_it_ended_for_idling(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: R70 made a transaction the server ended for idling fail with a ``StoreError``
    naming the bound and saying nothing was written, but only where the store's own code met
    the error (the COMMIT, a statement of the block): a part that runs its statement in the
    caller's transaction (``GrantRepository.within``: the nonce, a revocation) wrapped it in its
    own words (``cannot record the revocation: terminating connection due to idle-in-transaction
    timeout``), saying neither why nor that nothing was written, and the pool was not told to
    check its other connections. Now the store says it as it does for its own statements."""
    monkeypatch.setattr(pg, "IDLE_IN_TRANSACTION_TIMEOUT_S", 0.5, raising=False)
    store = PostgresStore(postgres_server.create_database())
    repo = GrantRepository(store)
    try:
        with pytest.raises(StoreError) as raised, store.transaction() as tx, repo.within(tx):
            tx.execute("SELECT 1")
            time.sleep(2)
            repo.revoke("a" * 64, now=1)
        assert not isinstance(raised.value, CommitUnknown), raised.value
        said = str(raised.value)
        assert "idle in transaction" in said and "0.5 s" in said and "nothing was written" in said, said
        assert store.query("SELECT count(*) FROM agentgate_revocations") == [(0,)]
    finally:
        repo.close()
        store.close()
