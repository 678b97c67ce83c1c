"""Review R91: ``GatedBroker.submit`` caught only ``Exception`` around ``Broker.submit``. A Ctrl-C
(``KeyboardInterrupt``) or a signal handler's ``SystemExit`` landing there after the decision was
linked, before the broker took the request, left the ``allow`` with no outcome, its row and
reservation held, and a second submit of the id was refused as "lost in a restart" though
nothing restarted. Now the allow is closed with an ``error`` outcome naming the interrupt and its
reservation returned, as for an ordinary error, and the interrupt is raised as is; a request the
broker did take (the interrupt landing in its journal write) stands, linked to its decision."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r88_direct_id_race import _outcomes
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest, Granted


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}")
    yield made
    made.process.gate.close()


def _interrupted_once(world: World, interrupt: BaseException) -> None:
    """Make the next ``Broker.submit`` raise ``interrupt`` before it takes the request."""
    broker = world.process.broker
    submit = broker.submit

    def interrupted(*args: object, **kwargs: object) -> object:
        broker.submit = submit  # type: ignore[method-assign]
        raise interrupt

    broker.submit = interrupted  # type: ignore[method-assign]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(1)], ids=["ctrl-c", "exit"])
def test_an_interrupt_before_the_broker_takes_the_request_closes_its_allow(
    world: World, interrupt: BaseException
) -> None:
    process = world.process
    _interrupted_once(world, interrupt)
    with pytest.raises(type(interrupt)):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert _outcomes(world) == [("error", allow.index)]
    error = process.entries()[-1]
    assert error.reasons == (f"interrupted ({type(interrupt).__name__}) before the broker took the request",)
    assert process.gated.decisions.get("job1") is None
    assert world.spent() == 0 and world.remaining() == world.budget  # its reservation returned
    assert not process.broker.holds("job1")
    # the id is free again: no "lost in a restart"
    answer = process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    assert answer.lease() is not None


def test_an_interrupt_after_the_broker_took_the_request_leaves_it_linked(world: World) -> None:
    process = world.process
    journal = process.broker.journal
    assert journal is not None
    save = journal.save

    def interrupted(*args: object, **kwargs: object) -> None:
        journal.save = save  # type: ignore[method-assign]
        raise KeyboardInterrupt

    journal.save = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    assert process.broker.holds("job1")
    decided = process.gated.decisions.get("job1")
    assert decided is not None and decided.reservations  # still linked, its budget reserved
    assert _outcomes(world) == []
    events = process.gated.advance()  # the grant comes out of the next call, against its decision
    assert [type(e) for e in events] == [Granted]
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert _outcomes(world) == [("lease_granted", allow.index)]
