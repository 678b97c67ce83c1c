"""Regression review (b) of R91 (item 3): an interrupt after ``Gate.authorize`` committed an allow
and its reservation, and before the decision's link was written (the allow's span, the broker's
``holds``, which waits for the broker's lock while another thread is in a journal write that
hangs), was in no handler: the allow kept no outcome and its reservation was held for ever. So was
one between a renewal's decision and ``Broker.renew``. Now each closes the allow with an ``error``
outcome and returns its reservation before the interrupt is raised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest
from agentgate.gate import Authorization


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def _interrupt_after_the_allow(world: World, where: str) -> None:
    """Raise ``KeyboardInterrupt`` once the next allow is committed: in its span (``trace``), or
    in the broker's ``holds`` asked right after it (``holds``)."""
    gate, broker = world.process.gate, world.process.broker
    trace, holds = gate.trace_allowed, broker.holds

    def interrupted(request_id: str) -> bool:
        broker.holds = holds  # type: ignore[method-assign]
        raise KeyboardInterrupt

    def traced(auth: Authorization) -> None:
        gate.trace_allowed = trace  # type: ignore[method-assign]
        if where == "trace":
            raise KeyboardInterrupt
        trace(auth)
        broker.holds = interrupted  # type: ignore[method-assign]

    gate.trace_allowed = traced  # type: ignore[method-assign]


@pytest.mark.parametrize("where", ["trace", "holds"])
def test_a_submit_interrupted_before_its_link_closes_its_allow(world: World, where: str) -> None:
    process = world.process
    _interrupt_after_the_allow(world, where)
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"] == [("error", allow.index)]
    assert process.gated.decisions.get("job1") is None and not process.broker.holds("job1")
    assert world.remaining() == world.budget  # its reservation returned
    assert (
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100")).lease() is not None
    )


def test_a_renewal_interrupted_before_the_broker_closes_its_allow(world: World) -> None:
    process = world.process
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    world.clock.now += 30
    _interrupt_after_the_allow(world, "trace")
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    _job1, renewal = (e.index for e in process.entries() if e.kind == "allow")
    assert [e.status for e in process.entries() if e.kind == "outcome" and e.ref == renewal] == ["error"]
    assert next(lease for lease in process.broker.leases() if lease.id == "job1").expires_at == 1060.0
    world.clock.now += 10
    process.gated.release(world.trainer, "job1")
    assert world.spent() == 4 * 40 * 1000
    assert world.remaining() == world.budget - world.spent()  # nothing left reserved
