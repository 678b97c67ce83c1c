"""Regression review of R92 (item 1): the events a broker call other than ``submit`` and
``renew`` gives out (``Broker.release``, ``advance``, ``end_due``) were lost to an interrupt (a
Ctrl-C) that CPython handles as the broker releases its lock, the broker's outbox already
emptied: a released lease was never audited as ended, its decision and reservation held until
``reconcile`` charged it all it reserved. Now they are kept with the ``GatedBroker`` before the
lock is released, and recorded at its next call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r91d_lock_release_interrupt import _interrupt_at_release
from test_broker_r92b_lock_exit_any_depth import _holding_job1, _outcomes
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest

# The release and advance interrupted as the broker returns (this review's first two tests) are
# the depth-0 cases of test_broker_r92b_lock_exit_any_depth's, merged there.


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from _holding_job1(tmp_path)


def test_the_clock_applied_before_a_submit_keeps_its_events_through_an_interrupt(world: World) -> None:
    process = world.process
    world.clock.now += 100  # job1 expired at 1060: its id is free, its end due
    _interrupt_at_release(world, "end_due")
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    again = process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    assert again.allowed and again.lease() is not None
    assert _outcomes(world) == ["lease_granted", "lease_expired", "lease_granted"]
    assert world.spent() == 4 * 60 * 1000  # the first lease, at its time held


def test_the_pass_after_a_renewal_keeps_its_events_through_an_interrupt(world: World) -> None:
    process = world.process
    process.gated.submit(world.trainer, GangRequest("job2", "x", 2, gpu_type="H100", ttl_s=5))
    broker = process.broker
    real = broker.renew

    def renewed_then_armed(lease_id: str) -> object:
        broker.renew = real  # type: ignore[method-assign]
        world.clock.now += 10  # job2 expires at 1005 in Broker.renew, given out by the pass after it
        answer = real(lease_id)
        _interrupt_at_release(world, "advance")  # the pass _record_pending makes after it
        return answer

    broker.renew = renewed_then_armed  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    assert process.gated.decisions.get("job2") is not None
    assert [type(event).__name__ for event in process.gated.advance()] == ["LeaseEnded"]
    assert _outcomes(world) == ["lease_granted", "lease_granted", "lease_expired"]
    assert process.gated.decisions.get("job2") is None
