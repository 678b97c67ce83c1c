"""Review R91 (item 4): ``GatedBroker.submit`` caught only ``StoreError`` around the decision's link
(``decisions.add``, a store commit of its own, after the Gate committed the allow). A Ctrl-C
(``KeyboardInterrupt``) or a signal handler's ``SystemExit`` landing in that write left the
``allow`` with no outcome and its reservation held, nothing to settle it but ``budget settle`` by
hand (and, once the row was written, the id refused as "lost in a restart"). Now the allow is
closed with an ``error`` outcome and its reservation returned, the row forgotten if it was
written, as for a ``StoreError``, and the interrupt is raised as is; the broker never sees the
request."""

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


def _link_interrupted(world: World, interrupt: BaseException, *, written: bool) -> None:
    """Make the next decision's link raise ``interrupt``, once its row is ``written`` or before."""
    decisions = world.process.gated.decisions
    add = decisions.add

    def interrupted(*args: object, **kwargs: object) -> bool:
        decisions.add = add  # type: ignore[method-assign]
        if written:
            add(*args, **kwargs)  # type: ignore[arg-type]
        raise interrupt

    decisions.add = interrupted  # type: ignore[method-assign]


@pytest.mark.parametrize("written", [False, True], ids=["before-the-row", "after-the-row"])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(1)], ids=["ctrl-c", "exit"])
def test_an_interrupted_link_closes_its_allow_and_returns_its_reservation(
    world: World, interrupt: BaseException, written: bool
) -> None:
    process = world.process
    _link_interrupted(world, interrupt, written=written)
    with pytest.raises(type(interrupt)):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert _outcomes(world) == [("error", allow.index)]
    assert process.entries()[-1].reasons == (
        "the lease's decision could not be recorded: "
        f"interrupted ({type(interrupt).__name__}) before the broker took the request",
    )
    assert process.gated.decisions.get("job1") is None  # a row written is forgotten
    assert world.spent() == 0 and world.remaining() == world.budget  # its reservation returned
    assert not process.broker.holds("job1")
    answer = process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    assert answer.lease() is not None  # the id is free: no "lost in a restart"
