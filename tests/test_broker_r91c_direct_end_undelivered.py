"""Regression review (c) of R91 (item 2): a request queued on the ``Broker`` directly and released
there as the journal write failed leaves its ``LeaseEnded`` in ``Broker.undelivered()``, the
broker holding the id no more. ``GatedBroker.submit`` of that id asked only whether the id had a
decision or was held, so it skipped ``end_due``, linked the new decision, and ``Broker.submit``
then gave out the stale end, which closed the NEW decision (charged the old lease's time): the new
lease ran unlinked, never charged. Now an id with an end not given out yet is ended first, as one
the clock ended: recorded before the new decision is linked, or, while the journal still fails,
the new request refused with ``StoreError``, its reservation returned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import BrokerSnapshot, GangRequest
from agentgate.errors import StoreError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def _released_directly_unjournaled(world: World, failures: int) -> None:
    """Queue ``job1`` on the broker directly, hold it 5 s, and release it there as the journal
    fails for the next ``failures`` writes."""
    broker = world.process.broker
    broker.submit(GangRequest("job1", "team-a", 4, gpu_type="H100"))  # around the gate
    world.clock.now += 5
    journal = broker.journal
    assert journal is not None
    save = journal.save
    left = [failures]

    def failing(snapshot: BrokerSnapshot) -> None:
        if left[0]:
            left[0] -= 1
            raise StoreError("database is locked")
        save(snapshot)

    journal.save = failing  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        broker.release("job1")
    assert not broker.holds("job1") and broker.undelivered()  # its end not given out yet


def test_a_direct_end_not_given_out_is_recorded_before_the_new_decision(world: World) -> None:
    process = world.process
    _released_directly_unjournaled(world, failures=1)
    answer = process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert answer.lease() is not None
    world.clock.now += 50
    process.gated.release(world.trainer, "job1")
    decision = answer.authorization.audit_index
    outcomes = [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"]
    assert outcomes == [
        ("lease_released", None),  # the direct request's end, linked to no decision
        ("lease_granted", decision),
        ("lease_released", decision),
    ]
    assert world.spent() == 4 * 50 * 1000  # the new lease's own 50 s, not the old one's 5
    assert world.remaining() == world.budget - world.spent()


def test_a_direct_end_the_journal_still_cannot_give_out_refuses_the_id(world: World) -> None:
    process = world.process
    _released_directly_unjournaled(world, failures=2)
    with pytest.raises(
        StoreError, match="the end of the earlier request with this id could not be journaled"
    ):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert [e.status for e in process.entries() if e.kind == "outcome" and e.ref == allow.index] == ["error"]
    assert process.gated.decisions.get("job1") is None and not process.broker.holds("job1")
    assert world.remaining() == world.budget  # its reservation returned
