"""Review R96: a call queued for the slot of a call of another event loop, when that loop was
then closed under its call, waited until some other call queued (R95 gives such a slot back
only when noticed: a hang in a quiet process). The rate timer thread now looks for closed loops
while such calls wait. A process of one loop, or of sync calls alone, never polls.

Real schedulers on one ``SharedLimits``, the holder on a real second loop in a thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

from test_tasks_r95_closed_loop_slot import CONFIG, WAIT_S

from agentgate.tasks import Attempt, Scheduler, SharedLimits, SyncScheduler, ToolCall


def _hold_until_closed(
    limits: SharedLimits, close_now: threading.Event, kept: list[Any] | None
) -> threading.Thread:
    """A call of a scheduler on a new loop in a thread holds the slot; its loop closes once
    ``close_now`` is set. ``kept``: its task and scheduler are appended (``None``: nothing of them
    is kept, so its task is garbage once the loop is gone; also used by
    test_tasks_r96_gc_in_reclaim)."""
    entered = threading.Event()

    def run() -> None:
        scheduler = Scheduler(limits=limits)
        loop = asyncio.new_event_loop()

        async def start() -> None:
            async def hold(_attempt: Attempt) -> None:
                entered.set()
                await asyncio.Event().wait()

            task = asyncio.ensure_future(scheduler.submit(ToolCall("t"), hold))
            if kept is not None:
                kept.extend((task, scheduler))
            while not entered.is_set():
                await asyncio.sleep(0)

        contextvars.Context().run(loop.run_until_complete, start())
        close_now.wait(WAIT_S)
        loop.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert entered.wait(WAIT_S)
    return thread


async def _ran(_attempt: Attempt) -> str:
    return "ran"


async def test_an_async_call_queued_before_the_holders_loop_closed_starts() -> None:
    limits = SharedLimits(CONFIG)
    here = Scheduler(limits=limits)
    close_now, kept = threading.Event(), []
    thread = await asyncio.to_thread(_hold_until_closed, limits, close_now, kept)
    queued = asyncio.ensure_future(here.submit(ToolCall("t"), _ran))
    while not limits.queued:
        await asyncio.sleep(0.001)
    close_now.set()
    await asyncio.to_thread(thread.join, WAIT_S)
    assert await asyncio.wait_for(queued, WAIT_S) == "ran"  # waited for another call for good
    assert limits.in_flight == 0
    await here.aclose()
    limits.close()


def test_a_sync_call_queued_before_the_holders_loop_closed_starts() -> None:
    limits = SharedLimits(CONFIG)
    close_now, kept = threading.Event(), []
    thread = _hold_until_closed(limits, close_now, kept)
    timer = threading.Timer(0.05, close_now.set)  # closed while the sync call below waits
    timer.start()
    with SyncScheduler(limits=limits) as scheduler:
        assert scheduler.submit(ToolCall("t", deadline=time.time() + WAIT_S), lambda _attempt: "ran") == "ran"
    thread.join(WAIT_S)
    assert limits.in_flight == 0
    limits.close()
