"""Review R61: what a user sees when ``SyncScheduler`` calls run in ``asyncio.to_thread`` and the
``asyncio.run`` around them ends first (Python 3.11: the loop's default executor is joined with
no timeout). Real scheduler, real worker threads, a real ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import threading
import time

from agentgate.tasks import Attempt, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

TOOL_S = 0.3  # how long the sync tool runs after its caller stopped waiting


def test_asyncio_run_returns_only_after_the_sync_tools_its_threads_run_have_ended() -> None:
    """Review R61: a caller that stops waiting for a sync call (``wait_for`` around
    ``asyncio.to_thread``) does not stop the tool: ``asyncio.run`` returns only once that tool
    and the call queued behind it (in another worker thread) have run, their slots given back,
    and nothing is refused, lost or warned about (``filterwarnings = error``)."""
    scheduler = SyncScheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}))
    ended: list[str] = []
    running = threading.Event()

    def slow(attempt: Attempt) -> str:
        running.set()
        time.sleep(TOOL_S)
        ended.append("slow")
        return "late"

    def queued(attempt: Attempt) -> str:
        ended.append("queued")
        return "ran"

    async def main() -> None:
        first = asyncio.ensure_future(asyncio.to_thread(scheduler.submit, ToolCall("t"), slow))
        await asyncio.to_thread(running.wait, 10.0)
        second = asyncio.ensure_future(asyncio.to_thread(scheduler.submit, ToolCall("t"), queued))
        while scheduler.scheduler.queued < 1:
            await asyncio.sleep(0.001)
        for future in (first, second):
            future.cancel()  # the caller leaves; the worker threads go on
        assert ended == []

    asyncio.run(main())
    assert ended == ["slow", "queued"]
    assert scheduler.scheduler.in_flight == 0 and scheduler.scheduler.queued == 0
    scheduler.close()
