"""Review R87b: R87's ``Gate.attach_dispatcher`` held the gate's ``_dispatch_lock`` (a plain lock)
while the dispatcher's ``start`` ran. A signal handler calling ``gate.close()`` in the attaching
thread deadlocked on it, and a ``close(timeout_s=1)`` from another thread waited for ever on a
start that never returned. The start now runs outside the lock: a ``close`` meanwhile returns
without waiting for it, and the attach, once the start returns, finds the gate closed, stops
the dispatcher and raises ``DispatchError``. A dispatcher whose start fails is also given its
``aclose`` (what that raises dropped) before its loop thread stops, so a half-started one's
clients are closed.

Real components: a Gate on a SQLite file (``test_gate``'s policy); stand-in dispatchers whose
``start`` waits, signals or fails."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import cast

import pytest
from test_gate import Setup
from test_gate_r87_attach_dispatcher import _dispatch_threads, _StandIn
from test_gate_r87_attach_dispatcher import setup as setup  # the fixture

from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.errors import DispatchError


class _Waiting(_StandIn):
    """A dispatcher whose ``start`` waits until ``release`` is set, first sending ``signal_to`` (a
    thread id) ``SIGUSR1`` when given; ``aclose`` is counted, and raises when ``fails`` is."""

    def __init__(self, release: threading.Event, signal_to: int | None = None, fails: bool = False) -> None:
        super().__init__()
        self.release = release
        self.signal_to = signal_to
        self.fails = fails
        self.started = threading.Event()

    async def start(self) -> None:
        self.started.set()
        if self.signal_to is not None:
            signal.pthread_kill(self.signal_to, signal.SIGUSR1)
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        if self.fails:
            raise OSError("no connection pool today")

    async def aclose(self) -> None:
        await super().aclose()
        if self.fails:
            raise OSError("nothing to close")


def test_a_close_from_another_thread_does_not_wait_for_a_start_that_has_not_returned(setup: Setup) -> None:
    release = threading.Event()
    standin = _Waiting(release)
    raised: list[BaseException] = []

    def attach() -> None:
        try:
            setup.gate.attach_dispatcher(cast(Dispatcher, standin))
        except BaseException as exc:
            raised.append(exc)

    attaching = threading.Thread(target=attach)
    attaching.start()
    assert standin.started.wait(5)
    closing = threading.Thread(target=setup.gate.close, kwargs={"timeout_s": 1})
    closing.start()
    closing.join(5)
    closed_meanwhile = not closing.is_alive()  # until R87b it waited for the start
    release.set()
    attaching.join(5)
    closing.join(5)
    assert closed_meanwhile
    assert len(raised) == 1 and isinstance(raised[0], DispatchError)
    assert "the gate was closed while the dispatcher started: it was stopped, not attached" in str(raised[0])
    assert standin.closed == 1 and not setup.gate.dispatches


class _HandlerExit(Exception):
    """What the signal handler raises once it closed the gate (as ``sys.exit`` would)."""


class _Deadlocked(Exception):
    """Raised by an alarm should the handler's ``close`` wait on the lock its own thread holds."""


@contextmanager
def _on_usr1(on_signal: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``SIGUSR1`` handled by ``on_signal`` in the block, and an alarm after 3 s raising
    ``_Deadlocked``; both handlers put back after it."""

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise _Deadlocked

    before_usr1 = signal.signal(signal.SIGUSR1, on_signal)
    before_alarm = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 3.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before_alarm)
        signal.signal(signal.SIGUSR1, before_usr1)


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signal handlers run in the main thread"
)
def test_a_signal_handlers_close_in_the_attaching_thread_closes_the_gate(setup: Setup) -> None:
    release = threading.Event()
    standin = _Waiting(release, signal_to=threading.get_ident())
    closed: list[bool] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        setup.gate.close(timeout_s=1)
        closed.append(True)
        raise _HandlerExit

    try:
        # until R87b: _Deadlocked, the handler's close never got the lock
        with _on_usr1(on_signal), pytest.raises(_HandlerExit):
            setup.gate.attach_dispatcher(cast(Dispatcher, standin))
    finally:
        release.set()
    assert closed == [True] and standin.closed == 1 and not setup.gate.dispatches


def test_a_failed_start_closes_the_half_started_dispatcher_and_raises_its_error(setup: Setup) -> None:
    release = threading.Event()
    release.set()
    standin = _Waiting(release, fails=True)
    before = _dispatch_threads()
    with pytest.raises(OSError, match="no connection pool today"):  # not aclose's error
        setup.gate.attach_dispatcher(cast(Dispatcher, standin))
    assert standin.closed == 1 and not setup.gate.dispatches and _dispatch_threads() == before


def test_a_second_attach_while_the_first_starts_is_refused(setup: Setup) -> None:
    release = threading.Event()
    first = _Waiting(release)
    attaching = threading.Thread(target=setup.gate.attach_dispatcher, args=(first,))
    attaching.start()
    assert first.started.wait(5)
    raised: list[BaseException] = []

    def attach_second() -> None:
        try:
            setup.gate.attach_dispatcher(cast(Dispatcher, _Waiting(release)))
        except BaseException as exc:
            raised.append(exc)

    second = threading.Thread(target=attach_second)
    second.start()
    second.join(5)
    refused_meanwhile = not second.is_alive()  # until R87b it waited for the first start
    release.set()
    attaching.join(5)
    second.join(5)
    assert refused_meanwhile and len(raised) == 1 and isinstance(raised[0], DispatchError)
    assert "a dispatcher is being attached to this gate already" in str(raised[0])
    assert setup.gate._dispatch is not None and setup.gate._dispatch[0] is first
