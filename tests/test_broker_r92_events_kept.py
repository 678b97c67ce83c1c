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
from test_broker_r91d_lock_release_interrupt import _InterruptedAtRelease
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    made.process.gated.submit(made.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    yield made
    made.process.gate.close()


def _interrupt_in(world: World, call: str) -> None:
    """An interrupt handled as the broker's lock is last released after its next ``call``."""
    broker = world.process.broker
    lock = _InterruptedAtRelease(broker._lock)
    broker._lock = lock  # type: ignore[assignment]
    real = getattr(broker, call)

    def armed(*args: object, **kwargs: object) -> object:
        setattr(broker, call, real)
        lock.arm()
        return real(*args, **kwargs)

    setattr(broker, call, armed)


def _outcomes(world: World) -> list[str]:
    return [e.status for e in world.process.entries() if e.kind == "outcome"]


def test_a_release_interrupted_as_the_broker_returns_is_audited_at_the_time_held(world: World) -> None:
    process = world.process
    world.clock.now += 10
    _interrupt_in(world, "release")
    with pytest.raises(KeyboardInterrupt):
        process.gated.release(world.trainer, "job1")
    assert process.broker.leases() == []
    ended = process.gated.advance()  # the release's end, kept for this call
    assert [type(event).__name__ for event in ended] == ["LeaseEnded"]
    assert _outcomes(world) == ["lease_granted", "lease_released"]
    assert process.gated.decisions.get("job1") is None
    assert process.gated.reconcile() == []  # not lost: charged the 10 s held, not the 60 reserved
    assert world.spent() == 4 * 10 * 1000
    assert world.remaining() == world.budget - world.spent()


def test_an_advance_interrupted_as_the_broker_returns_keeps_the_expiry(world: World) -> None:
    process = world.process
    world.clock.now += 100  # expired at 1060
    _interrupt_in(world, "advance")
    with pytest.raises(KeyboardInterrupt):
        process.gated.advance()
    assert [type(event).__name__ for event in process.gated.advance()] == ["LeaseEnded"]
    assert _outcomes(world) == ["lease_granted", "lease_expired"]
    assert world.spent() == 4 * 60 * 1000
    assert world.remaining() == world.budget - world.spent()


def test_the_clock_applied_before_a_submit_keeps_its_events_through_an_interrupt(world: World) -> None:
    process = world.process
    world.clock.now += 100  # job1 expired at 1060: its id is free, its end due
    _interrupt_in(world, "end_due")
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
        _interrupt_in(world, "advance")  # the pass _record_pending makes after it
        return answer

    broker.renew = renewed_then_armed  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    assert process.gated.decisions.get("job2") is not None
    assert [type(event).__name__ for event in process.gated.advance()] == ["LeaseEnded"]
    assert _outcomes(world) == ["lease_granted", "lease_granted", "lease_expired"]
    assert process.gated.decisions.get("job2") is None
