"""Review R88 (unconfirmed item, confirmed): the shared rate buckets and breakers of
``store/leases.py`` wrote the whole ``repr`` of the key (and of the stored value) into their
``StoreError`` and ``InputError`` texts: a corrupt row of a 100,000-character tool's bucket gave
a message of 100,000 characters, where the project quotes outside values short (``quoted``).
They now quote key, state and value as ``quoted`` does.

Real components: a SQLite store, ``SharedRateLimits``, ``SharedBreakers`` and ``LeaseManager``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import InputError, StoreError
from agentgate.store import SQLiteStore
from agentgate.store.leases import Lease, LeaseManager, SharedBreakers, SharedRateLimits

_KEY = "tool:" + "k" * 100_000
_SHORT = 400


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "s.db")


def _corrupt(store: SQLiteStore, statement: str) -> None:
    with store.transaction() as tx:
        tx.execute(statement)


def test_a_corrupt_bucket_of_a_long_key_is_named_short(store: SQLiteStore) -> None:
    buckets = SharedRateLimits(store)
    assert buckets.try_take(_KEY, 1.0, 5) == 0.0
    _corrupt(store, "UPDATE agentgate_rate_buckets SET tokens = '" + "x" * 10_000 + "'")
    with pytest.raises(StoreError, match=r"rate bucket 'tool:kkk.*: tokens: the stored value 'xxx") as caught:
        buckets.try_take(_KEY, 1.0, 5)
    assert len(str(caught.value)) < _SHORT
    store.close()


def test_a_corrupt_breaker_row_of_a_long_key_is_named_short(store: SQLiteStore) -> None:
    breakers = SharedBreakers(store)
    assert breakers.publish(_KEY, "open", 1000.0)
    _corrupt(store, "UPDATE agentgate_breakers SET state = '" + "s" * 10_000 + "'")
    with pytest.raises(StoreError, match=r"shared breaker 'tool:kkk.*: the stored state is 'sss") as caught:
        breakers.read(_KEY)
    assert len(str(caught.value)) < _SHORT
    _corrupt(store, "UPDATE agentgate_breakers SET state = 'open', version = 'v'")
    with pytest.raises(
        StoreError, match=r"shared breaker 'tool:kkk.*: version: the stored value 'v'"
    ) as caught:
        breakers.read(_KEY)
    assert len(str(caught.value)) < _SHORT
    with pytest.raises(InputError, match="a shared breaker state is open or closed, got 'ooo") as refused:
        breakers.publish(_KEY, "o" * 100_000, 1000.0)
    assert len(str(refused.value)) < _SHORT
    store.close()


def test_a_lease_of_another_holder_is_named_short(store: SQLiteStore) -> None:
    manager = LeaseManager(store, ttl_s=30, holder="h" * 100_000)
    try:
        with pytest.raises(InputError, match="only its holder releases it") as caught:
            manager.release(Lease(_KEY, 0, "id", "other" * 20_000))
        assert len(str(caught.value)) < _SHORT
    finally:
        manager.close()
        store.close()
