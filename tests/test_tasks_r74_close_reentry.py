"""Review R74 (second look at the close robustness): a close that must not wait for the close
in progress, and an ``aclose`` after a loop was closed under a retry's backoff.

Real schedulers, real event loops and real threads. Threads that could deadlock are daemons joined
with a bound, so a regression fails the test instead of hanging the run.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

import pytest

from agentgate.errors import SchedulingError
from agentgate.tasks import RetryPolicy, Scheduler, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

WAIT_S = 10.0
CONFIG = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


def test_aclose_after_a_loop_closed_under_a_backoff_does_not_raise(caplog: pytest.LogCaptureFixture) -> None:
    """Review R74: a call waits out its retry backoff on an event loop that is then closed under
    it; ``aclose`` from a new loop closes the scheduler instead of failing with "RuntimeError:
    Event loop is closed" waking that backoff (the scheduler left half closed)."""
    config = SchedulerConfig(
        tools={"t": ToolLimits(retry=RetryPolicy(attempts=2, backoff_initial_s=WAIT_S, backoff_max_s=WAIT_S))}
    )
    scheduler = Scheduler(config)
    failed = asyncio.Event()

    async def refused(_attempt: object) -> str:
        failed.set()
        raise ConnectionRefusedError("down")

    loop = asyncio.new_event_loop()
    call = loop.create_task(scheduler.submit(ToolCall("t"), refused))
    loop.run_until_complete(failed.wait())
    while scheduler._closing is None or not scheduler._closing[1]._waiters:  # type: ignore[attr-defined]
        loop.run_until_complete(asyncio.sleep(0))
    loop.close()  # the backoff: pending for good

    asyncio.run(asyncio.wait_for(scheduler.aclose(), WAIT_S))
    with pytest.raises(SchedulingError, match="closed"):
        asyncio.run(scheduler.submit(ToolCall("t"), refused))
    del call, scheduler
    with caplog.at_level(logging.ERROR, logger="asyncio"):  # "destroyed but it is pending"
        gc.collect()


def _daemon(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def _both_ended_and_closed(
    scheduler: SyncScheduler, caller: threading.Thread, closer: threading.Thread, outcome: list[object]
) -> None:
    """The call ran to its end and the close returned, neither waiting for the other: the
    scheduler's loop is closed."""
    caller.join(WAIT_S)
    closer.join(WAIT_S)
    assert not caller.is_alive()
    assert not closer.is_alive()
    assert outcome == ["ran"]
    assert scheduler._loop.is_closed()


def test_a_close_from_a_running_tool_while_another_close_drains_does_not_deadlock() -> None:
    """Review R74: a tool that closes its own scheduler (``drain=False``), while another thread's
    ``close()`` drains waiting for that very call, returns instead of waiting for that close: with
    the close lock held through the whole close, each waited for the other for ever (before R74
    the tool's close returned at once)."""
    scheduler = SyncScheduler(CONFIG)
    running = threading.Event()
    draining = threading.Event()
    outcome: list[object] = []

    def closing_tool(_attempt: object) -> str:
        running.set()
        assert draining.wait(WAIT_S)
        scheduler.close(drain=False)
        return "ran"

    caller = _daemon(lambda: outcome.append(scheduler.submit(ToolCall("t"), closing_tool)))
    assert running.wait(WAIT_S)
    closer = _daemon(scheduler.close)
    while not scheduler.scheduler._closed:
        threading.Event().wait(0.001)
    draining.set()
    _both_ended_and_closed(scheduler, caller, closer, outcome)


class _CloseInWait(threading.Condition):
    """A condition whose first ``wait`` runs ``close`` first, as a signal handler (SIGTERM:
    ``scheduler.close()``) lands in a drain that waits there."""

    scheduler: SyncScheduler | None = None

    def wait(self, timeout: float | None = None) -> bool:
        scheduler, self.scheduler = self.scheduler, None
        if scheduler is not None:  # a handler runs while the wait has let go of the lock
            self.release()
            try:
                scheduler.close()
            finally:
                self.acquire()
            return False  # woken (the handler's drain took the notice): the drain checks again
        return super().wait(timeout)


def test_a_close_reentered_in_the_closing_thread_does_not_deadlock() -> None:
    """Review R74: ``close()`` re-entered in the thread that is closing (a signal handler that
    closes the scheduler, landing while ``close()`` drains) returns at once, and the first close
    then finishes: with a close lock that was not re-entrant, the handler waited for ever for its own
    thread (before R74 it returned at once)."""
    scheduler = SyncScheduler(CONFIG)
    running = threading.Event()
    release = threading.Event()
    outcome: list[object] = []

    def held(_attempt: object) -> str:
        running.set()
        assert release.wait(WAIT_S)
        return "ran"

    caller = _daemon(lambda: outcome.append(scheduler.submit(ToolCall("t"), held)))
    assert running.wait(WAIT_S)
    idle = _CloseInWait(scheduler._lock)
    idle.scheduler = scheduler
    scheduler._idle = idle
    closer = _daemon(scheduler.close)
    while idle.scheduler is not None:
        threading.Event().wait(0.001)
    release.set()
    _both_ended_and_closed(scheduler, caller, closer, outcome)


def test_a_close_from_the_schedulers_own_thread_is_refused() -> None:
    """Review R74: ``close()`` called on the scheduler's own loop thread raises ``SchedulingError``
    (as ``submit`` does there) and a close from another thread then works: it waited for work
    queued behind itself on that thread, hanging the loop thread and every later close."""
    scheduler = SyncScheduler(CONFIG)
    told: list[BaseException] = []
    done = threading.Event()

    def close_here() -> None:
        try:
            scheduler.close(drain=False)
        except BaseException as exc:  # what the loop thread's close raised, to assert on
            told.append(exc)
        done.set()

    scheduler._loop.call_soon_threadsafe(close_here)
    assert done.wait(WAIT_S)
    assert [type(e) for e in told] == [SchedulingError]
    assert "own thread" in str(told[0])
    closer = _daemon(scheduler.close)
    closer.join(WAIT_S)
    assert not closer.is_alive()
    assert scheduler._loop.is_closed()
