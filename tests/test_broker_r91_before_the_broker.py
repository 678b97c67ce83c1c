"""Regression review of R91 (an unconfirmed item): R91 closed the allow of a submit interrupted in
the decision's link write or in ``Broker.submit``, but not one interrupted between the two (the
policy's tenant, the wait left, the broker asked again for the id). Such a Ctrl-C left the row
and the reservation held, with no outcome, and the id refused as "lost in a restart". Now that
window is in ``Broker.submit``'s handler: the allow is closed with an ``error`` outcome, its row
forgotten and its reservation returned, and the interrupt is raised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r88_direct_id_race import _outcomes
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}")
    yield made
    made.process.gate.close()


def _interrupt_after_the_link(world: World, where: str) -> None:
    """Make ``where`` (``tenant_of``, ``holds``) raise ``KeyboardInterrupt`` once the link is written."""
    process = world.process
    decisions, target = process.gated.decisions, process.gate if where == "tenant_of" else process.broker
    add, real = decisions.add, getattr(target, where)

    def interrupted(*args: object) -> object:
        setattr(target, where, real)
        raise KeyboardInterrupt

    def linked(*args: object, **kwargs: object) -> bool:
        decisions.add = add  # type: ignore[method-assign]
        written = add(*args, **kwargs)  # type: ignore[arg-type]
        setattr(target, where, interrupted)
        return written

    decisions.add = linked  # type: ignore[method-assign]


@pytest.mark.parametrize("where", ["tenant_of", "holds"])
def test_an_interrupt_between_the_link_and_the_broker_closes_its_allow(world: World, where: str) -> None:
    process = world.process
    _interrupt_after_the_link(world, where)
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert _outcomes(world) == [("error", allow.index)]
    assert process.entries()[-1].reasons == (
        "interrupted (KeyboardInterrupt) before the broker took the request",
    )
    assert process.gated.decisions.get("job1") is None
    assert world.spent() == 0 and world.remaining() == world.budget  # its reservation returned
    assert not process.broker.holds("job1")
    answer = process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    assert answer.lease() is not None  # the id is free: no "lost in a restart"
