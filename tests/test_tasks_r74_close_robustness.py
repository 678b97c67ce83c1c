"""Review R74: closing a scheduler while calls wait or run, when the close itself is interrupted,
runs from another thread or on another event loop, or when the loop is closed under the drain.

Real schedulers, real event loops and real threads. An interrupt is made to land where the close
waits by a ``threading.Condition`` whose ``wait`` raises ``KeyboardInterrupt`` once (real signals
land there only by chance, as in tests/test_tasks_r65b_interrupt_window.py).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from agentgate.errors import SchedulingError
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

WAIT_S = 10.0
CONFIG = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


class _InterruptedOnce(threading.Condition):
    """A condition whose first ``wait`` is interrupted by a Ctrl-C, as a signal would interrupt it."""

    interrupted = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        return super().wait(timeout)


class _Holding:
    """Sync callers in threads: one runs a tool blocked until ``release``, the others wait for its slot."""

    def __init__(self, scheduler: SyncScheduler, callers: int) -> None:
        self.release = threading.Event()
        self.running = threading.Event()
        self.outcomes: list[object] = []
        self.threads = [threading.Thread(target=self._call, args=(scheduler,)) for _ in range(callers)]
        self._scheduler = scheduler

    def _tool(self, _attempt: object) -> str:
        self.running.set()
        assert self.release.wait(WAIT_S)
        return "ran"

    def _call(self, scheduler: SyncScheduler) -> None:
        try:
            self.outcomes.append(scheduler.submit(ToolCall("t"), self._tool))
        except Exception as exc:  # what each caller was told, to assert on
            self.outcomes.append(exc)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        assert self.running.wait(WAIT_S)
        while self._scheduler.scheduler.queued != len(self.threads) - 1:
            threading.Event().wait(0.001)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(WAIT_S)
            assert not thread.is_alive()


@pytest.fixture
def holding() -> Iterator[_Holding]:
    scheduler = SyncScheduler(CONFIG)
    held = _Holding(scheduler, 2)
    held.start()
    yield held
    held.release.set()
    held.join()
    scheduler.close(drain=False)


def test_a_close_interrupted_while_draining_is_finished_by_the_next_close(holding: _Holding) -> None:
    """Review R74: a Ctrl-C that lands while ``SyncScheduler.close()`` drains leaves the scheduler
    half closed; the next ``close()`` finishes the job (queued calls refused, the loop thread
    stopped). Until then it saw the closed flag and returned at once: the loop thread ran on, and
    the scheduler's loop and its descriptors were never closed."""
    scheduler = holding._scheduler
    scheduler._idle = _InterruptedOnce(scheduler._lock)
    with pytest.raises(KeyboardInterrupt):
        scheduler.close()
    assert scheduler._thread.is_alive()

    closer = threading.Thread(target=scheduler.close, kwargs={"drain": False})
    closer.start()
    holding.release.set()  # the running call can finish, so the close can return
    closer.join(WAIT_S)
    holding.join()

    assert not closer.is_alive()
    assert not scheduler._thread.is_alive()
    assert scheduler._loop.is_closed()
    assert holding.outcomes.count("ran") == 1
    assert [type(o) for o in holding.outcomes if o != "ran"] == [SchedulingError]


def test_a_second_close_from_another_thread_returns_once_the_scheduler_is_closed(holding: _Holding) -> None:
    """Review R74: ``close()`` from a second thread while a first ``close()`` drains returns only
    when the scheduler is closed, as the first does. Until then it returned at once (the closed
    flag was set), its caller going on as if the loop thread had stopped while calls still ran."""
    scheduler = holding._scheduler
    first = threading.Thread(target=scheduler.close)
    first.start()
    while not scheduler.scheduler._closed:
        threading.Event().wait(0.001)
    second_returned = threading.Event()
    thread_alive_at_return: list[bool] = []

    def second_close() -> None:
        scheduler.close()
        thread_alive_at_return.append(scheduler._thread.is_alive())
        second_returned.set()

    second = threading.Thread(target=second_close)
    second.start()
    holding.release.set()
    for thread in (first, second):
        thread.join(WAIT_S)
        assert not thread.is_alive()
    holding.join()

    assert thread_alive_at_return == [False]
    assert holding.outcomes == ["ran", "ran"]  # drained: the queued call ran too


async def _slow(_attempt: object) -> str:
    await asyncio.sleep(WAIT_S)
    return "slow"


def test_a_drain_whose_loop_is_closed_under_it_leaves_nothing_raising_at_collection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review R74: ``aclose`` waits for calls; the loop is stopped and closed under the drain (its
    tasks still pending), and the scheduler closed again from a new loop. When the dead calls are
    collected, their end no longer wakes the first drain's event on the closed loop: that raised
    "RuntimeError: Event loop is closed", printed by Python as "Exception ignored in: <coroutine
    object Scheduler._run>"."""
    scheduler = Scheduler(CONFIG)
    loop = asyncio.new_event_loop()
    calls = [loop.create_task(scheduler.submit(ToolCall("t"), _slow)) for _ in range(3)]
    closing = loop.create_task(scheduler.aclose())
    while scheduler._idle is None:
        loop.run_until_complete(asyncio.sleep(0))
    loop.close()  # the drain, the running call and the queued ones: pending for good
    asyncio.run(asyncio.wait_for(scheduler.aclose(), WAIT_S))

    dead = [weakref.ref(task) for task in [*calls, closing]]
    unraisable: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        del calls, closing, scheduler  # its limits' queue holds the queued calls' futures
        with caplog.at_level(logging.ERROR, logger="asyncio"):  # "destroyed but it is pending"
            gc.collect()
    finally:
        sys.unraisablehook = previous
    assert [repr(u.exc_value) for u in unraisable] == []
    assert [ref() for ref in dead] == [None] * 4  # collected here, not at the process's exit


def test_aclose_on_another_event_loop_than_its_calls_is_refused_before_anything_stops() -> None:
    """Review R74: ``aclose`` awaited on an event loop other than the live one its calls run on
    (in another thread) raises ``SchedulingError`` naming the loops, and stops nothing: the calls
    go on to their results and a close on their own loop then works. Until then it marked the
    scheduler closed and cancelled the other loop's tasks from the wrong thread, and failed with
    asyncio's "Non-thread-safe operation" ``RuntimeError`` (in debug mode a drain hung)."""
    scheduler = Scheduler(CONFIG)
    queued = threading.Event()
    finish = threading.Event()
    outcome: list[object] = []

    async def quick(_attempt: object) -> str:
        await asyncio.get_running_loop().run_in_executor(None, finish.wait, WAIT_S)
        return "ran"

    async def calls_then_close() -> None:
        running = [asyncio.ensure_future(scheduler.submit(ToolCall("t"), quick)) for _ in range(2)]
        while scheduler.queued != 1:
            await asyncio.sleep(0)
        queued.set()
        outcome.extend(await asyncio.gather(*running, return_exceptions=True))
        await scheduler.aclose()

    thread = threading.Thread(target=asyncio.run, args=(calls_then_close(),))
    thread.start()
    assert queued.wait(WAIT_S)
    try:
        with pytest.raises(SchedulingError, match="event loop"):
            asyncio.run(scheduler.aclose(drain=False))
    finally:
        finish.set()
        thread.join(WAIT_S)
    assert not thread.is_alive()
    assert outcome == ["ran", "ran"]
    with pytest.raises(SchedulingError, match="closed"):
        asyncio.run(scheduler.submit(ToolCall("t"), _slow))
