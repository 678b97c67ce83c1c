"""Review R87: a ``GatedBroker`` renewal decided the request's ``timeout_s`` as the broker had cut
it (agentgate/dispatch/broker/_gated.py).

``submit`` queued the request with its ``timeout_s`` cut to the grant's time left less ``ttl_s``
(3539.41 for a 3600 s grant), and ``renew`` decided the renewal with that stored value: a policy
that bounds ``timeout_s`` from below (``in: [600, 3600]``, ``ge: 3600``, ``eq: 3600``) allowed the
request and refused its renewal, and the lease ran out. Now the request keeps the ``timeout_s`` it
was decided with, and only its wait in the queue is cut (``Broker.submit``'s ``wait_s``): the
queue entry's ``deadline``, which the journal keeps and a restart restores as it was.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from test_broker import FakeClock
from test_broker_gated import Setup

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    GatedBroker,
    TenantQuota,
    TimedOut,
    synthetic_topology,
)
from agentgate.errors import BrokerError
from agentgate.store.broker_leases import BrokerLeaseStore


@pytest.mark.parametrize(
    "bound",
    ["timeout_s: {in: [600, 3600]}", "timeout_s: {ge: 3600}", "timeout_s: {eq: 3600}"],
    ids=["in", "ge", "eq"],
)
def test_a_renewal_is_decided_with_the_timeout_s_the_request_was_allowed(tmp_path: Path, bound: str) -> None:
    setup = Setup(tmp_path, constraints=bound)
    try:
        trainer = setup.ids["trainer"]
        answer = setup.gated.submit(trainer, GangRequest("ft-1", "x", 8, gpu_type="H100", timeout_s=3600))
        lease = answer.lease()
        assert answer.allowed and lease is not None
        assert lease.request.timeout_s == 3600
        setup.clock.now += 30

        renewed = setup.gated.renew(trainer, "ft-1")

        assert renewed.expires_at == setup.clock.now + 60
        decisions = [e for e in setup.entries() if e.kind in ("allow", "deny")]
        assert [e.kind for e in decisions] == ["allow", "allow"]
    finally:
        setup.gate.close()


def test_a_waiting_request_keeps_its_timeout_s_and_waits_no_longer_than_its_grant_allows(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    journal = BrokerLeaseStore(setup.gate.store)
    quotas = [TenantQuota("team-a", 16, cohort="lab"), TenantQuota("team-b", 8, cohort="lab")]
    topology = synthetic_topology(nodes=3, gpus_per_node=8)
    setup.broker = Broker(topology, quotas, clock=setup.clock, ttl_s=60, journal=journal)
    setup.gated = GatedBroker(setup.gate, setup.broker)
    try:
        trainer, other = setup.ids["trainer"], setup.ids["other"]
        for who, request_id in ((trainer, "a-1"), (trainer, "a-2"), (other, "b-1")):  # the cluster, full
            assert setup.gated.submit(who, GangRequest(request_id, "x", 8, gpu_type="H100")).lease()
        submitted = time.time()
        waiting = setup.gated.submit(trainer, GangRequest("late", "x", 8, gpu_type="H100", timeout_s=3600))
        assert waiting.allowed and waiting.lease() is None
        (queued,) = setup.broker.queue()
        wait = queued.deadline - queued.submitted_at
        assert queued.request.timeout_s == 3600
        assert wait <= trainer.chain.expires - submitted - 60

        # The deadline survives a restart exactly, not the request's whole timeout_s.
        restarted = Broker(
            topology, quotas, clock=setup.clock, ttl_s=60, journal=BrokerLeaseStore(setup.gate.store)
        )
        saved = journal.load()
        assert saved is not None
        restarted.restore(saved)
        assert [q.deadline for q in restarted.queue()] == [queued.deadline]

        setup.clock.now = queued.deadline
        (timed_out,) = [e for e in restarted.advance() if isinstance(e, TimedOut)]
        assert timed_out.request.id == "late" and timed_out.waited_s == wait
    finally:
        setup.gate.close()


def test_the_timed_out_outcome_names_the_wait_it_had(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        trainer, other = setup.ids["trainer"], setup.ids["other"]
        for who, request_id in ((trainer, "a-1"), (trainer, "a-2"), (other, "b-1")):
            assert setup.gated.submit(who, GangRequest(request_id, "x", 8, gpu_type="H100")).lease()
        setup.gated.submit(trainer, GangRequest("late", "x", 8, gpu_type="H100", timeout_s=3600))
        (queued,) = setup.broker.queue()
        setup.clock.now = queued.deadline
        setup.gated.advance()
        (entry,) = [e for e in setup.entries() if e.status == "lease_timed_out"]
        waited = (
            f"waited {queued.deadline - queued.submitted_at:g} s without being placed whole; held nothing"
        )
        assert entry.reasons == (waited,) and "3600" not in waited
    finally:
        setup.gate.close()


def _broker() -> Broker:
    return Broker(synthetic_topology(nodes=1, gpus_per_node=8), [TenantQuota("a", 8)], clock=FakeClock())


@pytest.mark.parametrize(
    ("wait_s", "deadline"),
    [(None, 3600.0), (math.inf, 3600.0), (7200.0, 3600.0), (100, 100.0)],
    ids=["none", "inf", "longer", "shorter"],
)
def test_submit_waits_the_shorter_of_timeout_s_and_wait_s(wait_s: float | None, deadline: float) -> None:
    broker = _broker()
    broker.submit(GangRequest("hold", "a", 8))
    broker.submit(GangRequest("r", "a", 8, timeout_s=3600), wait_s=wait_s)
    (q,) = broker.queue()
    assert q.deadline - q.submitted_at == deadline and q.request.timeout_s == 3600


@pytest.mark.parametrize(
    "wait_s",
    [math.nan, -1.0, -math.inf, True, "10", 10**400],
    ids=["nan", "negative", "-inf", "bool", "text", "huge"],
)
def test_a_wait_s_that_is_no_wait_is_refused_and_nothing_is_queued(wait_s: object) -> None:
    broker = _broker()
    with pytest.raises(BrokerError, match=r"request 'r': wait_s must be a number >= 0 or inf, got "):
        broker.submit(GangRequest("r", "a", 1), wait_s=wait_s)  # type: ignore[arg-type]
    assert broker.queue() == [] and broker.leases() == []
