"""Review R96: a call of an event loop closed under it gives its slots back when its coroutine is
closed as it is collected (R95). That give-back took ``SharedLimits.lock`` (a ``threading.Lock``),
and the collector runs on whichever thread allocates, which may hold that lock: the thread then
waited on itself, and every caller of the limits after it, for good. It now never waits for the
lock: when the lock is taken, the call is left to the lock's next holder (``closed_calls``), given
back before the next call queues.

A real scheduler on a real second loop in a thread, closed under its calls; the collection is
made explicitly with the lock held (as an allocation inside any ``with limits.lock:`` does)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading

from test_tasks_r95_closed_loop_slot import CONFIG, WAIT_S

from agentgate.tasks import Attempt, Scheduler, SharedLimits, SyncScheduler, ToolCall


def _calls_on_a_closed_loop(limits: SharedLimits, calls: int) -> None:
    """Start ``calls`` calls of one tool (concurrency 1: the first holds the slot, the others
    queue) of a scheduler on a new loop in a thread, then close that loop and drop the scheduler
    and its tasks (as when a scheduler is dropped): they are cyclic garbage."""

    def run() -> None:
        scheduler = Scheduler(limits=limits)
        loop = asyncio.new_event_loop()

        async def start() -> None:
            entered = asyncio.Event()

            async def hold(_attempt: Attempt) -> None:
                entered.set()
                await asyncio.Event().wait()

            for _ in range(calls):
                asyncio.ensure_future(scheduler.submit(ToolCall("t"), hold))  # noqa: RUF006  (garbage on purpose)
            await entered.wait()
            await asyncio.sleep(0)

        contextvars.Context().run(loop.run_until_complete, start())
        loop.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive() and limits.tool_in_flight == {"t": 1}
    assert limits.queued == calls - 1


def _collect_holding_the_lock(limits: SharedLimits) -> bool:
    """Collect the garbage on a thread that holds the lock; True when it came back."""

    def collect() -> None:
        with limits.lock:
            gc.collect()

    thread = threading.Thread(target=collect, daemon=True)  # left blocked when it hangs
    thread.start()
    thread.join(WAIT_S)
    return not thread.is_alive()


def _check(calls: int) -> None:
    limits = SharedLimits(CONFIG)
    enabled = gc.isenabled()
    gc.disable()  # collected below only, with the lock held
    try:
        _calls_on_a_closed_loop(limits, calls)
        if calls > 1:
            # A queued call is kept alive by the queue (its future) until its loop is found
            # closed: its slots go back then, and only then is its task garbage.
            with limits.lock:
                limits.reclaim_closed()
            assert limits.in_flight == 0 and limits.queued == 0
        assert _collect_holding_the_lock(limits)  # hung for good
    finally:
        if enabled:
            gc.enable()
    assert not limits.lock.locked()
    assert limits.closed_calls  # left to the lock's next holder
    with SyncScheduler(limits=limits) as scheduler:  # its call queues: they are given back first
        assert scheduler.submit(ToolCall("t"), lambda _attempt: "ran") == "ran"
    assert limits.in_flight == 0 and limits.tool_in_flight == {} and limits.queued == 0
    assert not limits.closed_calls


def test_a_running_call_collected_while_its_collector_holds_the_lock() -> None:
    _check(1)


def test_queued_calls_collected_while_their_collector_holds_the_lock() -> None:
    """Their slots given back already, the queued ones leave the queue through ``_left_queue``,
    which took the lock too."""
    _check(3)
