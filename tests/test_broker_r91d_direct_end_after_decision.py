"""Regression review (d) of R91 (item 2): ``GatedBroker.submit`` asked whether an id's end was
still in the broker (``Broker.undelivered``) only before the Gate's decision; asked again under
the broker's lock, just before ``Broker.submit``, was only whether the broker held the id. A
request queued on the ``Broker`` directly while the decision's link was written, and released
there as its journal write failed, left its ``LeaseEnded`` undelivered with the id no longer held:
``Broker.submit`` gave it out and it closed the NEW decision, whose lease ran unlinked, never
charged. Now that request counts as queued directly since the decision: the new request is
refused (``BrokerError``), its reservation returned, and the old end is recorded as its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import BrokerSnapshot, GangRequest
from agentgate.errors import BrokerError, StoreError
from agentgate.store.broker_decisions import LeaseDecision


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def _queued_and_ended_directly_as_linked(world: World) -> None:
    """As the next decision's link is written, queue ``job1`` on the broker directly and release
    it there as the journal write fails: its end stays in the broker, the id held no more."""
    process = world.process
    broker = process.broker
    journal = broker.journal
    assert journal is not None
    decisions = process.gated.decisions
    add, save = decisions.add, journal.save

    def failed_once(snapshot: BrokerSnapshot) -> None:
        journal.save = save  # type: ignore[method-assign]
        raise StoreError("database is locked")

    def linked(decided: LeaseDecision) -> bool:
        decisions.add = add  # type: ignore[method-assign]
        added = add(decided)
        broker.submit(GangRequest("job1", "team-a", 1))  # another thread, around the gate
        journal.save = failed_once  # type: ignore[method-assign]
        with pytest.raises(StoreError):
            broker.release("job1")
        assert not broker.holds("job1") and broker.undelivered()
        return added

    decisions.add = linked  # type: ignore[method-assign,assignment]


def test_a_direct_end_left_undelivered_after_the_decision_refuses_the_request(world: World) -> None:
    process = world.process
    _queued_and_ended_directly_as_linked(world)
    with pytest.raises(BrokerError, match="'job1' is already live"):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    allow = next(e.index for e in process.entries() if e.kind == "allow")
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"] == [("error", allow)]
    assert process.gated.decisions.get("job1") is None and not process.broker.leases()
    assert world.remaining() == world.budget  # its reservation returned

    process.gated.advance()  # the direct request's end, given out now, is its own
    outcomes = [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"]
    assert outcomes[1:] == [("lease_released", None)]  # linked to no decision
    answer = process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert answer.lease() is not None
    world.clock.now += 50
    process.gated.release(world.trainer, "job1")
    assert world.spent() == 4 * 50 * 1000  # the new lease is charged the time it held
    assert world.remaining() == world.budget - world.spent()
