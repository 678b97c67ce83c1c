"""``LeaseManager`` takes the lease lifetimes ``SchedulerConfig.lease_ttl_s`` takes, 1 s to ten
years, as docs/tasks.md says (review R87). Until then it took any ``ttl_s`` above 0: with
``ttl_s=1e-6`` its heartbeat renewed without pause, and the single slot it held was taken by a
second holder at once, while the first still held it."""

from __future__ import annotations

import re

import pytest

from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.store.leases import LeaseManager
from agentgate.tasks import SchedulerConfig
from agentgate.tasks._config import MIN_LEASE_TTL_S


def test_the_shortest_lease_is_the_scheduler_configurations() -> None:
    from agentgate.store.leases import MIN_TTL_S

    assert MIN_TTL_S == MIN_LEASE_TTL_S == 1.0


@pytest.mark.parametrize("ttl_s", [1e-6, 0.001, 0.5, 0.999])
def test_a_lease_shorter_than_a_second_is_refused_as_the_scheduler_refuses_it(
    sqlite_store: SQLiteStore, ttl_s: float
) -> None:
    with pytest.raises(InputError, match=r"lease_ttl_s must be >= 1\.0"):
        SchedulerConfig(lease_ttl_s=ttl_s)
    with pytest.raises(
        InputError,
        match=rf"^lease ttl_s must be a finite number of at least 1 and at most .*, got {re.escape(repr(ttl_s))}$",
    ):
        LeaseManager(sqlite_store, ttl_s=ttl_s)


def test_a_lease_of_the_shortest_lifetime_keeps_its_slot(sqlite_store: SQLiteStore) -> None:
    holder, other = LeaseManager(sqlite_store, ttl_s=1), LeaseManager(sqlite_store, ttl_s=10)
    try:
        assert holder.ttl_s == 1.0
        assert holder.try_acquire("tool:x", 1) is not None
        assert other.try_acquire("tool:x", 1) is None
    finally:
        holder.close()
        other.close()
