"""Second regression review of R92 (item 1): the events a broker call gives out were handed to the
``GatedBroker`` only once the call returned (``_take``, under the broker's lock), and a Ctrl-C
that CPython handles at the broker call's own ``with self._lock`` exit (a reentrant release
then, where a pending signal is handled all the same) still lost them, the outbox emptied: a
released lease was never audited as ended, its decision and reservation held until
``reconcile`` charged it all it reserved. Now the broker puts them in the ``GatedBroker``'s keeping
(``Broker.sink``) before it releases its lock, at whatever depth the lock is held."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r91d_lock_release_interrupt import _interrupt_at_release, _InterruptedAtRelease
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest


def _holding_job1(tmp_path: Path, held_s: int = 0) -> Iterator[World]:
    """A World whose trainer holds ``job1`` (4 H100, until 1060), the clock ``held_s`` on; its
    Gate closed after. Shared with the other R92 broker regression tests."""
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    made.process.gated.submit(made.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    made.clock.now += held_s
    yield made
    made.process.gate.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from _holding_job1(tmp_path)


def _held(lock: _InterruptedAtRelease, depth: int) -> None:
    for _ in range(depth):
        lock.acquire()


def _outcomes(world: World) -> list[str]:
    return [e.status for e in world.process.entries() if e.kind == "outcome"]


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_a_release_interrupted_at_the_broker_calls_own_exit_is_audited(world: World, depth: int) -> None:
    """At depth 0 also the regression review of R92 (item 1)'s release interrupted as the broker
    returns (test_broker_r92_events_kept, merged here): audited at the time held."""
    process = world.process
    world.clock.now += 10
    lock = _interrupt_at_release(world, "release")
    _held(lock, depth)  # the caller holds the broker's lock around the call, as often as this
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


@pytest.mark.parametrize("depth", [0, 2])
def test_an_advance_interrupted_at_the_broker_calls_own_exit_keeps_the_expiry(
    world: World, depth: int
) -> None:
    """At depth 0 also the regression review of R92 (item 1)'s advance interrupted as the broker
    returns (test_broker_r92_events_kept, merged here): the expiry kept."""
    process = world.process
    world.clock.now += 100  # expired at 1060
    _held(_interrupt_at_release(world, "advance"), depth)
    with pytest.raises(KeyboardInterrupt):
        process.gated.advance()
    assert [type(event).__name__ for event in process.gated.advance()] == ["LeaseEnded"]
    assert _outcomes(world) == ["lease_granted", "lease_expired"]
    assert world.spent() == 4 * 60 * 1000
    assert world.remaining() == world.budget - world.spent()


@pytest.mark.parametrize("depth", [0, 1])
def test_a_submit_interrupted_at_the_broker_calls_own_exit_stands_and_keeps_its_grant(
    world: World, depth: int
) -> None:
    process = world.process
    _held(_interrupt_at_release(world, "submit"), depth)
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job2", "x", 2, gpu_type="H100"))
    assert sorted(lease.id for lease in process.broker.leases()) == ["job1", "job2"]
    assert [type(event).__name__ for event in process.gated.advance()] == ["Granted"]
    assert _outcomes(world) == ["lease_granted", "lease_granted"]  # not closed as an error
    world.clock.now += 20
    process.gated.release(world.trainer, "job2")
    assert _outcomes(world)[-1] == "lease_released"
    assert world.spent() == 2 * 20 * 1000  # the lease is charged the time it held
