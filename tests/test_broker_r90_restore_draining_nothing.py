"""Review R90: ``Broker.restore`` refuses a waiting request that drains with no GPUs nominated.

A draining request reserves its whole group (``_Preempting._try_drain``); no live broker leaves one
draining with none. Restore took one all the same: it counted against ``max_draining`` for its
whole wait, so with ``max_draining=1`` no gang drained, and it drained nothing either. It is now
refused with ``BrokerError`` naming the request, the broker as it was; the same request not
draining is taken, and drains as any request does.
"""

from __future__ import annotations

import pytest
from test_broker import FakeClock

from agentgate.dispatch.broker import (
    Broker,
    BrokerSnapshot,
    GangRequest,
    QueuedRequest,
    TenantQuota,
    TopologyConstraint,
    synthetic_topology,
)
from agentgate.errors import BrokerError


def _snapshot(clock: FakeClock, draining: bool) -> tuple[BrokerSnapshot, Broker]:
    """Two nodes of 4 GPUs, each held by two leases of 2, and ``ghost``, a gang of 4 that wants
    one node, waiting with nothing nominated (``draining`` as given); a broker to restore it on,
    on which one gang may drain at once, as soon as it waits."""
    topology = synthetic_topology(nodes=2, gpus_per_node=4)
    source = Broker(topology, [TenantQuota("a", 16)], clock=clock, ttl_s=10**6)
    for i in range(4):
        source.submit(GangRequest(f"h{i}", "a", 2, priority=9))
    ghost = GangRequest("ghost", "a", 4, topology=TopologyConstraint("node"))
    queued = QueuedRequest(ghost, clock.now, clock.now + 3600.0, (), (), draining)
    restored = Broker(
        topology, [TenantQuota("a", 16)], clock=clock, ttl_s=10**6, drain_after_s=0.0, max_draining=1
    )
    return BrokerSnapshot(clock.now, tuple(source.leases()), (queued,)), restored


def test_a_request_draining_with_no_gpus_nominated_is_refused_changing_nothing() -> None:
    clock = FakeClock()
    snapshot, broker = _snapshot(clock, draining=True)
    with pytest.raises(BrokerError, match=r"'ghost' drains with no nominated GPUs"):
        broker.restore(snapshot)  # until the review: taken, holding the one draining slot
    assert broker.leases() == [] and broker.queue() == [] and broker.free_gpus() == 8


def test_the_same_request_not_draining_is_taken_and_drains_a_node() -> None:
    clock = FakeClock()
    snapshot, broker = _snapshot(clock, draining=False)
    broker.restore(snapshot)
    broker.advance()
    (ghost,) = broker.queue()
    assert ghost.draining and len(ghost.nominated) == 4
