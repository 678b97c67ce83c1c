"""The ``queued`` event of a call that waits in an event loop's scheduler is counted without the
metrics' lock (review R72: on the loop's thread, as the attempt loop counts ``started``); it must
count every queued call, and past ``MAX_LABEL_VALUES`` tools under ``OTHER``, as ``tally`` does."""

from __future__ import annotations

import asyncio

from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, ToolCall, ToolLimits
from agentgate.tasks._metrics import MAX_LABEL_VALUES, OTHER


async def _ok(_attempt: Attempt) -> str:
    return "ok"


async def test_queued_calls_are_counted_per_tool_up_to_the_label_bound_then_as_other() -> None:
    """Review R72: the queued count written out in ``enqueue`` for an event loop's scheduler keeps
    ``tally``'s answers: one per queued call, at most ``MAX_LABEL_VALUES`` tools, the rest ``OTHER``."""
    scheduler = Scheduler(SchedulerConfig(tools={"hold": ToolLimits(concurrency=1)}, result_cache_size=0))
    release = asyncio.Event()

    async def hold(_attempt: Attempt) -> str:
        await release.wait()
        return "held"

    try:
        holding = asyncio.ensure_future(scheduler.submit(ToolCall("hold"), hold))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(scheduler.submit(ToolCall("hold"), hold))
        await asyncio.sleep(0)
        assert scheduler.queued == 1  # from here on every call queues behind it, then starts
        tools = 2 * MAX_LABEL_VALUES
        results = await asyncio.gather(*(scheduler.submit(ToolCall(f"gen.{i}"), _ok) for i in range(tools)))
        assert results == ["ok"] * tools
        release.set()
        assert await asyncio.gather(holding, waiting) == ["held", "held"]
        queued = {tool: n for (name, tool), n in scheduler.metrics.events.items() if name == "queued"}
    finally:
        await scheduler.aclose()
    assert sum(queued.values()) == tools + 1  # the second "hold" call and every gen.* call
    assert len(queued) <= MAX_LABEL_VALUES + 1
    assert queued[OTHER] == tools + 1 - sum(n for tool, n in queued.items() if tool != OTHER)
    assert queued[OTHER] >= MAX_LABEL_VALUES - 1
