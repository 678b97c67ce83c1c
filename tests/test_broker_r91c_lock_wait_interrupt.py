"""Regression review (c) of R91 (item 1): an interrupt (a Ctrl-C) that lands while
``GatedBroker.renew`` waits for the broker's lock, held by another thread through a journal write
that hangs, ran a handler that read the broker to tell whether the lease was extended, and so
waited again on the very lock the interrupt came out of: the Ctrl-C did nothing until the hung
write ended, and a second one landed in that read, outside every handler, leaving the renewal's
allow open and its reservation held for ever. ``GatedBroker.submit`` did the same waiting for
``Broker.submit`` (``_took``). Now the gated broker takes the broker's lock itself, around the
broker's call and the reading of what it did: an interrupt in that wait is raised at once, the
allow closed first."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest
from agentgate.gate import Authorization
from agentgate.store.broker_decisions import LeaseDecision


class LockStandIn:
    """The broker's lock as a test stands in for it: ``real``'s, taken and let go as ``real`` is
    (subclasses change ``acquire`` or ``release``; also tests/test_broker_r91d_lock_release_interrupt.py's)."""

    def __init__(self, real: threading.RLock) -> None:
        self.real = real

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self.real.acquire(blocking, timeout)

    def release(self) -> None:
        self.real.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class _HungLock(LockStandIn):
    """The broker's lock, into which ``hang`` puts another thread (a journal write that hangs)
    until the test frees it, or a second passes; the next wait for it after ``hang`` is
    interrupted, as a Ctrl-C pressed during that wait interrupts it."""

    def __init__(self, real: threading.RLock) -> None:
        super().__init__(real)
        self.interrupt = False
        self.free = threading.Event()
        self.released = threading.Event()

    def hang(self) -> None:
        holding = threading.Event()

        def hung_write() -> None:
            with self.real:
                holding.set()
                self.free.wait(1.0)
            self.released.set()

        threading.Thread(target=hung_write, daemon=True).start()
        holding.wait()
        self.interrupt = True

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        return super().acquire(blocking, timeout)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A broker world on a SQLite file (also tests/test_broker_r91d_lock_release_interrupt.py's)."""
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def _hung_lock(world: World) -> _HungLock:
    broker = world.process.broker
    lock = _HungLock(broker._lock)
    broker._lock = lock  # type: ignore[assignment]
    return lock


def _interrupted_without_waiting_again(lock: _HungLock) -> bool:
    """Whether the interrupt came back while the hung write still held the lock; then frees it."""
    came_back_at_once = not lock.released.is_set()
    lock.free.set()
    lock.released.wait()
    return came_back_at_once


def test_a_renewal_interrupted_waiting_for_the_broker_comes_back_at_once(world: World) -> None:
    process = world.process
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    world.clock.now += 30
    lock = _hung_lock(world)
    gate = process.gate
    trace = gate.trace_allowed

    def traced(auth: Authorization) -> None:  # the renewal is allowed: now the write hangs
        gate.trace_allowed = trace  # type: ignore[method-assign]
        trace(auth)
        lock.hang()

    gate.trace_allowed = traced  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    assert _interrupted_without_waiting_again(lock)
    _job1, renewal = (e.index for e in process.entries() if e.kind == "allow")
    assert [e.status for e in process.entries() if e.kind == "outcome" and e.ref == renewal] == ["error"]
    assert next(lease for lease in process.broker.leases() if lease.id == "job1").expires_at == 1060.0
    assert world.remaining() == world.budget - 240_000  # the renewal's 120,000 returned


def test_a_submit_interrupted_waiting_for_the_broker_comes_back_at_once(world: World) -> None:
    process = world.process
    lock = _hung_lock(world)
    decisions = process.gated.decisions
    add = decisions.add

    def linked(decided: LeaseDecision) -> bool:  # the decision is linked: now the write hangs
        decisions.add = add  # type: ignore[method-assign]
        added = add(decided)
        lock.hang()
        return added

    decisions.add = linked  # type: ignore[method-assign,assignment]
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert _interrupted_without_waiting_again(lock)
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"] == [("error", allow.index)]
    assert process.gated.decisions.get("job1") is None and not process.broker.holds("job1")
    assert world.remaining() == world.budget  # its reservation returned
