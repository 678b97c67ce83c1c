"""Review R90: after ``restore``, ``next_deadline`` is now while a request waits, until a call tries
the queue.

Only a nominated request whose victims had ended made ``next_deadline`` now after a restore. A
request that fits the restarted broker (a cluster or a quota larger than the snapshot's), or one
left waiting because ``grant_check``'s store was down when the snapshot was taken (the old broker's
``next_deadline`` said 1 s later: that retry is not in the snapshot), was granted by the next
``advance``, but ``next_deadline`` named its locality wait (1,800 s): a driver sleeping until then
left the GPUs idle beside it.
"""

from __future__ import annotations

from test_broker import FakeClock

from agentgate.dispatch.broker import Broker, GangRequest, Granted, TenantQuota, synthetic_topology
from agentgate.errors import StoreError


def _broker(clock: FakeClock, nodes: int, quota: int) -> Broker:
    topology = synthetic_topology(nodes=nodes, gpus_per_node=8)
    return Broker(topology, [TenantQuota("a", quota)], clock=clock, ttl_s=3600.0)


def _granted(broker: Broker) -> list[str]:
    return [e.lease.id for e in broker.advance() if isinstance(e, Granted)]


def test_a_request_that_fits_a_larger_cluster_is_named_now() -> None:
    clock = FakeClock()
    old = _broker(clock, nodes=1, quota=16)
    old.submit(GangRequest("hold", "a", 8))
    old.submit(GangRequest("wait", "a", 8, timeout_s=3000.0))
    clock.now = 10.0
    restarted = _broker(clock, nodes=2, quota=16)  # a node added
    restarted.restore(old.snapshot())
    assert restarted.free_gpus() == 8
    assert restarted.next_deadline() == 10.0  # until the review: 1800.0, its locality wait
    assert _granted(restarted) == ["wait"]
    assert restarted.next_deadline() == 3600.0  # tried: the leases' expiry is next


def test_a_request_held_back_by_a_store_that_was_down_is_named_now() -> None:
    clock = FakeClock()
    old = _broker(clock, nodes=1, quota=8)

    def down(request: GangRequest) -> str | None:
        raise StoreError("grants unreadable")

    old.grant_check = down
    old.submit(GangRequest("w", "a", 8, timeout_s=3000.0))
    assert old.next_deadline() == 1.0
    clock.now = 5.0
    restarted = _broker(clock, nodes=1, quota=8)
    restarted.restore(old.snapshot())
    restarted.grant_check = lambda request: None  # the store is back
    assert restarted.next_deadline() == 5.0  # until the review: 1800.0
    assert _granted(restarted) == ["w"]


def test_a_restored_broker_with_no_request_waiting_names_its_leases_expiry() -> None:
    clock = FakeClock()
    old = _broker(clock, nodes=1, quota=8)
    old.submit(GangRequest("hold", "a", 8))
    restarted = _broker(clock, nodes=1, quota=8)
    restarted.restore(old.snapshot())
    assert restarted.next_deadline() == 3600.0
