"""Regression review of R87: what ``GatedBroker.submit`` asks of the broker
(agentgate/dispatch/broker/_gated.py).

R87 made every gated submit apply the clock with ``Broker.advance``, a whole pass over the queue
with its preemption trials, before the decision: a request the policy refused cost that pass, and
an allowed one two passes (``Broker.submit`` makes its own). Now whether the id is live is asked
without moving the broker (``Broker.is_live``): a refused request tries no placement and writes no
journal, and an allowed one makes the placement trials of one ``Broker.submit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from test_broker_gated import Clock, Setup

from agentgate.dispatch.broker import (
    Broker,
    BrokerSnapshot,
    FreeIndex,
    GangRequest,
    GatedBroker,
    PlacementPolicy,
    TenantQuota,
    TopologyAware,
    synthetic_topology,
)

WAITING = 50


class Counting:
    """The broker's placement policy, counting its trials."""

    name = "counting"

    def __init__(self, policy: PlacementPolicy) -> None:
        self.policy, self.trials = policy, 0

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        self.trials += 1
        return self.policy.place(request, free, loosen=loosen)


class Journal:
    def __init__(self) -> None:
        self.saves = 0

    def save(self, snapshot: BrokerSnapshot) -> None:
        self.saves += 1

    def take_over(self, snapshot: BrokerSnapshot) -> None:
        pass


def _busy(clock: Clock) -> tuple[Broker, Counting, Journal]:
    """16 GPUs held at priority 1 and ``WAITING`` gangs of 8 waiting, queued around the gate."""
    topology = synthetic_topology(nodes=2, gpus_per_node=8)
    quotas: Sequence[TenantQuota] = [
        TenantQuota("team-a", 1000, cohort="lab"),
        TenantQuota("team-b", 1000, cohort="lab"),
    ]
    counting, journal = Counting(TopologyAware(topology)), Journal()
    broker = Broker(topology, quotas, policy=counting, clock=clock, ttl_s=600, journal=journal)
    for i in range(2):
        broker.submit(GangRequest(f"h{i}", "team-b", 8, priority=1))
    for i in range(WAITING):
        broker.submit(GangRequest(f"w{i}", "team-a", 8))
    counting.trials = journal.saves = 0
    return broker, counting, journal


def test_a_refused_submit_tries_no_placement_and_an_allowed_one_those_of_one_broker_submit(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    try:
        setup.broker, counting, journal = _busy(setup.clock)
        setup.gated = GatedBroker(setup.gate, setup.broker)

        refused = setup.gated.submit(setup.ids["chat"], GangRequest("c", "x", 1, gpu_type="H100"))
        assert not refused.allowed
        assert (counting.trials, journal.saves) == (0, 0)

        allowed = setup.gated.submit(setup.ids["trainer"], GangRequest("g", "x", 8, gpu_type="H100"))
        assert allowed.allowed and allowed.lease() is None  # it waits with the others

        plain, plain_counting, _ = _busy(Clock())
        plain.submit(GangRequest("g", "team-a", 8, gpu_type="H100"))
        # One trial each: a submit that places nothing tries only its own request (review R89;
        # before it, both tried every one of the WAITING requests too).
        assert counting.trials == plain_counting.trials == 1
    finally:
        setup.gate.close()
