"""Regression review (c) of R91 (item 4): ``Broker.undelivered()`` was documented as holding only
the events of a call that raised, but a ``renew`` that returns (it returns the lease, not events)
leaves there the events its clock and its pass caused too, until the next call that returns
events. This pins what the corrected docs say (the behaviour itself did not change)."""

from __future__ import annotations

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    LeaseEnded,
    TenantQuota,
    synthetic_topology,
)


def test_a_renewal_that_returns_leaves_its_events_undelivered_until_the_next_call() -> None:
    now = [0.0]
    broker = Broker(
        synthetic_topology(nodes=1, gpus_per_node=8), [TenantQuota("a", 8)], clock=lambda: now[0], ttl_s=60
    )
    broker.submit(GangRequest("l1", "a", 4))
    broker.submit(GangRequest("l2", "a", 4, ttl_s=10))
    broker.submit(GangRequest("w", "a", 4))  # waits for l2's GPUs
    now[0] = 30
    assert broker.renew("l1").expires_at == 90
    kept = broker.undelivered()
    assert [(type(e), e.lease.id) for e in kept if isinstance(e, LeaseEnded | Granted)] == [
        (LeaseEnded, "l2"),
        (Granted, "w"),
    ]
    assert broker.advance() == kept  # given out by the next call that returns events
    assert broker.undelivered() == []
