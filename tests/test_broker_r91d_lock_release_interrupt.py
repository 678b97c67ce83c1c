"""Regression review (d) of R91 (item 1): an interrupt (a Ctrl-C) that CPython handles as
``GatedBroker`` releases the broker's lock, after ``Broker.renew`` or ``Broker.submit`` returned,
was taken for one before the broker acted: the renewal's allow was closed as "not renewed" while
the lease ran the extension (charged its first reservation only), and the submit's allow was
closed as "interrupted before the broker took the request" while the broker granted it, its
lease run unlinked, never charged, its grant never audited. Now a broker call that returned has
acted: the renewal is linked to its lease, the request stands linked, and its events are kept
for the next call to record."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

import pytest
from test_broker_r91c_lock_wait_interrupt import LockStandIn, world  # noqa: F401 (the fixture)
from test_broker_restart_budget import World

from agentgate.dispatch.broker import BrokerEvent, GangRequest


class _InterruptedAtRelease(LockStandIn):
    """The broker's lock, which raises ``KeyboardInterrupt`` once ``arm``-ed at the first release
    that leaves it held no deeper than when it was armed: a SIGINT that arrived while the broker
    worked, handled at the call of the lock's exit, the first that CPython reaches (the exit of
    the broker call's own ``with``, at whatever depth the caller holds the lock, or of the
    caller's ``with`` for one armed after the broker call returned). Until a second regression
    review of R92 it raised at the outermost release only, and missed the broker call's exit."""

    def __init__(self, real: threading.RLock) -> None:
        super().__init__(real)
        self.depth = 0
        self.armed_at: int | None = None

    def arm(self) -> None:
        self.armed_at = self.depth

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        taken = self.real.acquire(blocking, timeout)
        self.depth += taken
        return taken

    def release(self) -> None:
        self.depth -= 1
        self.real.release()
        if self.armed_at is not None and self.depth <= self.armed_at:
            self.armed_at = None
            raise KeyboardInterrupt


def _interrupt_at_release(
    world: World,  # noqa: F811 (the fixture's name)
    call: str,
    *,
    once_returned: bool = False,
) -> _InterruptedAtRelease:
    """The broker's lock, raising ``KeyboardInterrupt`` at the exit of the broker's next ``call``
    (armed at the depth the call is made at: raised at its own ``with``'s exit), or, with
    ``once_returned``, once that call returned: an interrupt landing as the gated broker releases
    the broker's lock (``renew``, ``submit``). Shared with the R92 regression tests."""
    broker = world.process.broker
    lock = _InterruptedAtRelease(broker._lock)
    broker._lock = lock  # type: ignore[assignment]
    real = getattr(broker, call)

    def armed(*args: object, **kwargs: object) -> object:
        setattr(broker, call, real)
        if not once_returned:
            lock.arm()
        answer = real(*args, **kwargs)
        if once_returned:
            lock.arm()
        return answer

    setattr(broker, call, armed)
    return lock


def test_a_renewal_interrupted_after_the_broker_renewed_is_linked(
    world: World,  # noqa: F811 (the fixture)
) -> None:
    process = world.process
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    world.clock.now += 30
    _interrupt_at_release(world, "renew", once_returned=True)
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    assert [lease.expires_at for lease in process.broker.leases()] == [1090.0]  # renewed
    assert [e.status for e in process.entries() if e.kind == "outcome"] == ["lease_granted"]  # no error
    world.clock.now += 200
    process.gated.advance()  # expired at 1090: held 90 s
    assert [e.status for e in process.entries() if e.kind == "outcome"][-1] == "lease_expired"
    assert world.spent() == 4 * 90 * 1000  # the extension is charged with the lease
    assert world.remaining() == world.budget - world.spent()  # nothing left reserved


def test_a_submit_interrupted_after_the_broker_took_it_stands_and_keeps_its_events(
    world: World,  # noqa: F811 (the fixture)
) -> None:
    process = world.process
    _interrupt_at_release(world, "submit", once_returned=True)
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job2", "x", 2, gpu_type="H100"))
    allow = next(e.index for e in process.entries() if e.kind == "allow")
    assert [lease.id for lease in process.broker.leases()] == ["job2"]
    assert [e for e in process.entries() if e.kind == "outcome"] == []  # not closed as an error
    decided = process.gated.decisions.get("job2")
    assert decided is not None and decided.audit_index == allow
    granted = process.gated.advance()  # the grant Broker.submit gave out, kept for this call
    assert [type(event).__name__ for event in granted] == ["Granted"]
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"] == [("lease_granted", allow)]
    world.clock.now += 50
    process.gated.release(world.trainer, "job2")
    assert world.spent() == 2 * 50 * 1000  # the lease is charged the time it held
    assert world.remaining() == world.budget - world.spent()


class _InterruptedAfterExtend(deque[BrokerEvent]):
    """``GatedBroker._unrecorded``, whose next ``extend`` takes the events and then raises
    ``KeyboardInterrupt``: a SIGINT handled as that call returns."""

    armed = True

    def extend(self, events: Iterable[BrokerEvent]) -> None:
        super().extend(events)
        if self.armed and len(self):
            self.armed = False
            raise KeyboardInterrupt


def test_a_request_withdrawn_in_its_pass_then_interrupted_keeps_its_own_end(
    world: World,  # noqa: F811 (the fixture)
) -> None:
    process = world.process
    broker = process.broker
    check = broker.grant_check

    def refused_once(request: GangRequest) -> str | None:
        broker.grant_check = check
        return "refused once"

    broker.grant_check = refused_once
    process.gated._unrecorded = _InterruptedAfterExtend()
    with pytest.raises(KeyboardInterrupt):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert process.gated.decisions.get("job1") is not None  # kept for its own Withdrawn
    process.gated.advance()
    allow = next(e.index for e in process.entries() if e.kind == "allow")
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"] == [
        ("request_revoked", allow)
    ]
    assert world.remaining() == world.budget  # its reservation returned, once
