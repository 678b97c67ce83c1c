"""Review R66: preemption at the boundary where a victim's grace ends as the preemptor's wait does."""

from __future__ import annotations

from test_broker import FakeClock

from agentgate.dispatch.broker import (
    Broker,
    CheckpointNotice,
    GangRequest,
    Granted,
    LeaseEnded,
    TenantQuota,
    TimedOut,
    synthetic_topology,
)


def test_no_lease_is_preempted_whose_grace_ends_as_the_preemptors_wait_does() -> None:
    """Review R66: a victim whose grace ended at the very time its preemptor's wait did was a
    candidate (only a grace ending *after* the wait was refused), but the broker applies timeouts
    before grace ends: at that time the preemptor timed out and the victim was ended
    ``preempted`` all the same, checkpointed and killed for nobody."""
    clock = FakeClock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock, grace_s=10.0, ttl_s=1000.0)
    broker.submit(GangRequest("low", "a", 8, priority=0))
    clock.now = 5.0
    events = broker.submit(GangRequest("high", "a", 8, priority=1, timeout_s=10.0))
    assert not [e for e in events if isinstance(e, CheckpointNotice)]
    clock.now = 15.0
    events = broker.advance()
    assert [type(e) for e in events] == [TimedOut]
    assert [(lease.id, lease.state) for lease in broker.leases()] == [("low", "active")]


def test_a_grace_that_ends_before_the_wait_does_still_makes_a_victim() -> None:
    """Review R66: the boundary moved by no more than the equal case: a grace a moment shorter
    than the wait preempts, and the preemptor is granted when it ends."""
    clock = FakeClock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock, grace_s=9.5, ttl_s=1000.0)
    broker.submit(GangRequest("low", "a", 8, priority=0))
    clock.now = 5.0
    events = broker.submit(GangRequest("high", "a", 8, priority=1, timeout_s=10.0))
    assert [e.lease.id for e in events if isinstance(e, CheckpointNotice)] == ["low"]
    clock.now = 14.5
    events = broker.advance()
    assert [(type(e), e.lease.id) for e in events if isinstance(e, LeaseEnded | Granted)] == [
        (LeaseEnded, "low"),
        (Granted, "high"),
    ]


def test_a_lease_with_no_grace_is_preempted_by_a_request_that_waits_no_time() -> None:
    """Review R66: a victim with no grace ends in the call that notifies it, so its preemptor is
    granted within that call even when it may not wait at all (``timeout_s=0``)."""
    clock = FakeClock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock, grace_s=0.0, ttl_s=1000.0)
    broker.submit(GangRequest("low", "a", 8, priority=0))
    events = broker.submit(GangRequest("high", "a", 8, priority=1, timeout_s=0.0))
    assert [e.lease.id for e in events if isinstance(e, Granted)] == ["high"]
    assert [e.lease.id for e in events if isinstance(e, LeaseEnded)] == ["low"]
