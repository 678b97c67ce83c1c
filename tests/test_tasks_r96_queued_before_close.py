"""Review R96: a call queued for the slot of a call of another event loop, when that loop was
then closed under its call, waited until some other call queued (R95 gives such a slot back
only when noticed: a hang in a quiet process). The rate timer thread now looks for closed loops
while such calls wait. A process of one loop, or of sync calls alone, never polls.

Real schedulers on one ``SharedLimits``, the holder on a real second loop in a thread."""

from __future__ import annotations

import asyncio
import threading
import time

from test_tasks_r95_closed_loop_slot import CONFIG, WAIT_S, _ran, _start_then_close_loop

from agentgate.tasks import Scheduler, SharedLimits, SyncScheduler, ToolCall


async def test_an_async_call_queued_before_the_holders_loop_closed_starts() -> None:
    limits = SharedLimits(CONFIG)
    here = Scheduler(limits=limits)
    close_now, kept = threading.Event(), []
    thread = await asyncio.to_thread(_start_then_close_loop, limits, close_now=close_now, kept=kept)
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
    thread = _start_then_close_loop(limits, close_now=close_now, kept=kept)
    timer = threading.Timer(0.05, close_now.set)  # closed while the sync call below waits
    timer.start()
    with SyncScheduler(limits=limits) as scheduler:
        assert scheduler.submit(ToolCall("t", deadline=time.time() + WAIT_S), lambda _attempt: "ran") == "ran"
    thread.join(WAIT_S)
    assert limits.in_flight == 0
    limits.close()
