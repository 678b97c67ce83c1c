"""A node removed from the inventory while the broker was down does not stop the restart for a
lease on it that already ended (review R96); one still live there is refused as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_broker import FakeClock

from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


def _saved(clock: FakeClock) -> Broker:
    """A broker of two nodes with lease ``a`` (ttl 1 s) on n000 and ``b`` (ttl 100 s) on n001."""
    old = Broker(synthetic_topology(nodes=2, gpus_per_node=1), [TenantQuota("t", 2)], clock=clock, ttl_s=1)
    old.submit(GangRequest("a", "t", 1))
    old.submit(GangRequest("b", "t", 1, ttl_s=100))
    assert {lease.id: lease.gpus for lease in old.leases()} == {"a": ("n000/g0",), "b": ("n001/g0",)}
    return old


def test_a_lease_that_ended_on_a_removed_node_is_not_restored() -> None:
    clock = FakeClock()
    snapshot = _saved(clock).snapshot()
    smaller = synthetic_topology(nodes=1, gpus_per_node=1)
    clock.now += 200  # both leases ended while the broker was down
    new = Broker(smaller, [TenantQuota("t", 2)], clock=clock)
    new.restore(snapshot)
    assert [lease.id for lease in new.leases()] == ["a"]  # kept: ended at the next call


def test_a_live_lease_on_a_removed_node_is_still_refused() -> None:
    clock = FakeClock()
    snapshot = _saved(clock).snapshot()
    clock.now += 50  # b still live
    new = Broker(synthetic_topology(nodes=1, gpus_per_node=1), [TenantQuota("t", 2)], clock=clock)
    with pytest.raises(BrokerError, match="names unknown gpu"):
        new.restore(snapshot)


def test_a_restart_through_the_journal_after_a_node_was_removed_writes_again(tmp_path: Path) -> None:
    """The journal takes over the state it loaded, not the copy without the dropped lease (the
    R96 regression review: it found the stored state "written over", and every write of the
    restarted broker raised ``NotWriter``)."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "s.db")
    try:
        old = Broker(
            synthetic_topology(nodes=2, gpus_per_node=1),
            [TenantQuota("t", 2)],
            clock=clock,
            ttl_s=1,
            journal=BrokerLeaseStore(store),
        )
        old.submit(GangRequest("a", "t", 1))
        old.submit(GangRequest("b", "t", 1, ttl_s=100))
        clock.now += 200
        journal = BrokerLeaseStore(store)
        new = Broker(
            synthetic_topology(nodes=1, gpus_per_node=1), [TenantQuota("t", 2)], clock=clock, journal=journal
        )
        new.restore(journal.load())
        assert [event.lease.id for event in new.advance()] == ["a"]  # written, and a ended
        assert BrokerLeaseStore(store).load().leases == ()
    finally:
        store.close()


@pytest.mark.parametrize("expires_at", ["soon", float("-inf"), True], ids=["text", "minus-inf", "bool"])
def test_a_lease_time_that_is_none_is_refused_before_any_lease_is_dropped(expires_at: object) -> None:
    """Times are checked before a lease on a removed node is dropped (the R96 regression review:
    text was a ``TypeError``, and ``-inf`` or ``True`` dropped the lease with a warning)."""
    clock = FakeClock()
    snapshot = _saved(clock).snapshot()
    b = snapshot.leases[1]
    bad = dataclasses.replace(
        snapshot, leases=(snapshot.leases[0], dataclasses.replace(b, expires_at=expires_at))
    )
    clock.now += 200
    new = Broker(synthetic_topology(nodes=1, gpus_per_node=1), [TenantQuota("t", 2)], clock=clock)
    with pytest.raises(BrokerError, match="expires_at"):
        new.restore(bad)
