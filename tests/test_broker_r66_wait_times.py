"""Review R66: the locality wait and the drain delay end at the time ``next_deadline`` names."""

from __future__ import annotations

from test_broker import FakeClock

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    TenantQuota,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)

SUBMITTED, WAIT = 0.7, 0.1
"""A submission time and a wait whose float sum, less the submission time, is below the wait:
0.7 + 0.1 is 0.7999999999999999, and that less 0.7 is 0.09999999999999987."""


def test_a_gang_spreads_at_the_time_next_deadline_names_whatever_the_float_rounding() -> None:
    """Review R66: ``next_deadline`` named ``submitted_at + locality_wait_s`` while the broker
    took the wait as over when ``now - submitted_at >= locality_wait_s``, which float rounding
    can make false at that very time: a driver advancing at ``next_deadline`` found nothing
    placed, and ``next_deadline`` (only ahead of now) then no longer named the wait, so the gang
    slept to its timeout with the GPUs it could spread over free."""
    assert (SUBMITTED + WAIT) - SUBMITTED < WAIT
    clock = FakeClock()
    broker = Broker(
        synthetic_topology(3, 8), [TenantQuota("a", 24)], clock=clock, ttl_s=1e6, locality_wait_s=WAIT
    )
    domain = TopologyConstraint("nvlink_domain", required=True)
    for name in ("x", "y", "z"):  # 3 GPUs free on each node: 9 free, no domain whole
        broker.submit(GangRequest(name, "a", 5, topology=domain))
    clock.now = SUBMITTED
    comm = GangRequest("comm", "a", 8, hint=WorkloadHint(bound="communication"), timeout_s=3600.0)
    assert not [e for e in broker.submit(comm) if isinstance(e, Granted)]
    deadline = broker.next_deadline()
    assert deadline == SUBMITTED + WAIT
    clock.now = deadline
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["comm"]


def test_a_gang_starts_draining_at_the_time_next_deadline_names_whatever_the_float_rounding() -> None:
    """Review R66: the same for ``drain_after_s``: at ``submitted_at + drain_after_s``, the time
    ``next_deadline`` names, the gang did not drain, and no later deadline named it again."""
    clock = FakeClock()
    topology = synthetic_topology(2, 8)
    broker = Broker(
        topology,
        [TenantQuota("a", 16), TenantQuota("b", 16)],
        clock=clock,
        ttl_s=1000.0,
        locality_wait_s=10_000.0,
        drain_after_s=WAIT,
        max_draining=1,
    )
    broker.submit(GangRequest("x", "a", 6, topology=TopologyConstraint("nvlink_domain")))
    broker.submit(GangRequest("y", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    clock.now = SUBMITTED
    broker.submit(GangRequest("comm", "b", 4, hint=WorkloadHint(bound="communication")))
    deadline = broker.next_deadline()
    assert deadline == SUBMITTED + WAIT
    clock.now = deadline
    broker.advance()
    (queued,) = broker.queue()
    assert queued.draining
