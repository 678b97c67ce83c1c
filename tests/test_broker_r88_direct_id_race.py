"""Review R88: ``GatedBroker.submit`` asked whether the id was live once, before the Gate's
decision (a store commit, which takes real time). An id live at the broker without a decision of
this ``GatedBroker`` (a request queued on the ``Broker`` directly) that the clock ended during the
decision was ended by ``Broker.submit`` first, and that end was recorded against the new decision:
an expired lease settled the new reservation at the old lease's time and deleted its row, a
timed-out wait returned the new reservation whole; the new lease was granted unlinked and never
charged. Now an id live when it was checked, or queued at the broker since, refuses the allowed
request (``BrokerError``: already live), its reservation returned and its allow closed with an
``error`` outcome; the old request's end is recorded against no new decision.

The clock is moved inside ``Gate.authorize``, as the decision's own time moves it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest, Granted, LeaseEnded, TimedOut
from agentgate.errors import BrokerError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}")
    yield made
    made.process.gate.close()


def _during_the_decision(world: World, then: Callable[[], None]) -> None:
    """Make the next decision of the Gate run ``then`` once it is written (its time passing)."""
    gate = world.process.gate
    authorize = gate.authorize

    def slow(*args: object, **kwargs: object) -> object:
        gate.authorize = authorize  # type: ignore[method-assign]
        decided = authorize(*args, **kwargs)  # type: ignore[arg-type]
        then()
        return decided

    gate.authorize = slow  # type: ignore[method-assign]


def _outcomes(world: World) -> list[tuple[str | None, int | None]]:
    return [(e.status, e.ref) for e in world.process.entries() if e.kind == "outcome"]


def _assert_refused_and_returned(world: World, rid: str) -> None:
    allow = next(e for e in world.process.entries() if e.kind == "allow")
    assert _outcomes(world)[0] == ("error", allow.index)  # the refused allow is closed
    assert world.process.gated.decisions.get(rid) is None
    assert world.spent() == 0 and world.remaining() == world.budget  # its reservation returned


def test_a_direct_lease_that_expires_during_the_decision_is_not_ended_against_it(world: World) -> None:
    process = world.process
    process.broker.submit(GangRequest("A", "team-a", 2, gpu_type="H100", holder="direct"))  # ttl 60
    world.clock.now += 59.9995

    def expire() -> None:
        world.clock.now += 0.001

    _during_the_decision(world, expire)
    with pytest.raises(BrokerError, match="'A' is already live"):
        process.gated.submit(world.trainer, GangRequest("A", "x", 4, gpu_type="H100"))
    _assert_refused_and_returned(world, "A")
    ended = [e for e in process.gated.advance() if isinstance(e, LeaseEnded)]
    assert [(e.lease.id, len(e.lease.gpus)) for e in ended] == [("A", 2)]  # the old lease, 2 GPUs
    assert _outcomes(world)[1:] == [("lease_expired", None)]  # linked to no decision
    assert process.broker.leases() == []


def test_a_direct_wait_that_times_out_during_the_decision_is_not_ended_against_it(world: World) -> None:
    process = world.process
    process.broker.submit(GangRequest("B", "team-a", 6, gpu_type="H100", holder="direct", ttl_s=3600))
    process.broker.submit(GangRequest("A", "team-a", 4, gpu_type="H100", holder="direct", timeout_s=10))
    world.clock.now += 9.9995

    def time_out() -> None:
        world.clock.now += 0.001

    _during_the_decision(world, time_out)
    with pytest.raises(BrokerError, match="'A' is already live"):
        process.gated.submit(world.trainer, GangRequest("A", "x", 2, gpu_type="H100"))
    _assert_refused_and_returned(world, "A")
    events = process.gated.advance()
    assert [type(e) for e in events] == [TimedOut] and not any(isinstance(e, Granted) for e in events)
    assert _outcomes(world)[1:] == [("lease_timed_out", None)]


def test_an_id_queued_directly_during_the_decision_and_ended_is_not_ended_against_it(world: World) -> None:
    process = world.process

    def queue_and_expire() -> None:
        process.broker.submit(GangRequest("A", "team-a", 2, gpu_type="H100", holder="direct", ttl_s=1))
        world.clock.now += 2

    _during_the_decision(world, queue_and_expire)
    with pytest.raises(BrokerError, match="'A' is already live"):
        process.gated.submit(world.trainer, GangRequest("A", "x", 4, gpu_type="H100"))
    _assert_refused_and_returned(world, "A")
    process.gated.advance()
    assert _outcomes(world)[1:] == [("lease_expired", None)]  # its grant went to the direct caller
