"""Regression review of R87: a request submitted through ``GatedBroker`` as a lease expires ranks
as ``Broker.submit`` ranks it (agentgate/dispatch/broker/_gated.py, ``Broker.end_due``).

R87 made ``GatedBroker.submit`` apply the clock with ``Broker.advance`` before the request was
queued: the GPUs an expiry freed went to the requests already waiting, and a higher-priority
request submitted in that call waited behind a lower one, which a plain ``Broker.submit`` grants
after it. Now a fresh id goes to ``Broker.submit`` alone, and the id of an expired lease, ended
first, is ended by ``Broker.end_due``, which applies the clock without trying the queue.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_gated import Clock, Setup

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    LeaseEnded,
    TenantQuota,
    synthetic_topology,
)

QUOTAS = [TenantQuota("team-a", 8, cohort="lab"), TenantQuota("team-b", 8, cohort="lab")]


def _broker(clock: Clock) -> Broker:
    return Broker(synthetic_topology(nodes=1, gpus_per_node=8), QUOTAS, clock=clock, ttl_s=60)


def _plain(request_id: str) -> tuple[list[str], list[str]]:
    """Who holds and who waits after ``Broker.submit`` alone: "A" (8 GPUs) expired, "L" (priority
    0) waiting, then ``request_id`` at priority 1."""
    clock = Clock()
    broker = _broker(clock)
    broker.submit(GangRequest("A", "team-a", 8, gpu_type="H100"))
    broker.submit(GangRequest("L", "team-b", 8, gpu_type="H100"))
    clock.now += 70
    broker.submit(GangRequest(request_id, "team-a", 8, priority=1, gpu_type="H100"))
    return [lease.id for lease in broker.leases()], [q.request.id for q in broker.queue()]


@pytest.mark.parametrize("request_id", ["H", "A"], ids=["fresh-id", "the-expired-leases-id"])
def test_a_request_submitted_as_a_lease_expires_ranks_as_broker_submit_ranks_it(
    tmp_path: Path, request_id: str
) -> None:
    setup = Setup(tmp_path)
    try:
        setup.rebroker(nodes=1, team_a=8)
        trainer = setup.ids["trainer"]
        setup.gated.submit(trainer, GangRequest("A", "x", 8, gpu_type="H100"))
        setup.gated.submit(setup.ids["other"], GangRequest("L", "x", 8, gpu_type="H100"))
        setup.clock.now += 70  # "A" expired at 1060

        answer = setup.gated.submit(trainer, GangRequest(request_id, "x", 8, priority=1, gpu_type="H100"))

        held = ([lease.id for lease in setup.broker.leases()], [q.request.id for q in setup.broker.queue()])
        assert held == _plain(request_id) == ([request_id], ["L"])
        assert answer.lease() is not None
    finally:
        setup.gate.close()


def test_end_due_applies_the_clock_without_trying_the_queue() -> None:
    clock = Clock()
    broker = _broker(clock)
    broker.submit(GangRequest("A", "team-a", 8))
    broker.submit(GangRequest("L", "team-b", 8))
    clock.now += 70

    # Asking changes nothing: the expired lease is held, not live, until a call applies the clock.
    assert (broker.holds("A"), broker.is_live("A"), broker.is_live("L")) == (True, False, True)
    assert [lease.id for lease in broker.leases()] == ["A"]

    (ended,) = broker.end_due()
    assert isinstance(ended, LeaseEnded) and (ended.lease.id, ended.reason) == ("A", "expired")
    assert broker.leases() == [] and [q.request.id for q in broker.queue()] == ["L"]
    assert (broker.holds("A"), broker.holds(["A"]), broker.is_live(["A"])) == (False, False, False)  # type: ignore[arg-type]
    assert [type(e).__name__ for e in broker.advance()] == ["Granted"]
