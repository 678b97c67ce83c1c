"""Review R81: ``close()`` (``aclose()``) called by a tool of a call the scheduler is running, with
no other close in progress, drained: it waited for every call, that very call included, so it
never returned (docs/tasks.md covered a close re-entered in the closing thread, one from a tool
while another close runs, and one on the scheduler's own thread, not this). Rule: such a close
raises ``SchedulingError`` at once and closes nothing; after the call returns, ``close`` works."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentgate.errors import SchedulingError
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SyncScheduler, ToolCall

WAIT_S = 10.0  # bound on every wait: only a bug comes near it


def test_a_sync_tool_that_closes_its_own_scheduler_is_refused_not_left_waiting() -> None:
    scheduler = SyncScheduler(SchedulerConfig())
    said: list[BaseException] = []

    def tool(attempt: Attempt) -> str:
        try:
            scheduler.close()
        except SchedulingError as exc:
            said.append(exc)
        return "returned"

    results: list[str] = []
    caller = threading.Thread(
        target=lambda: results.append(scheduler.submit(ToolCall("t"), tool)), daemon=True
    )
    caller.start()
    caller.join(WAIT_S)
    assert not caller.is_alive(), "close() from the tool waited for the tool's own call"
    assert results == ["returned"]
    assert [str(exc).startswith("SyncScheduler.close from a call it is running") for exc in said] == [True]
    assert scheduler.submit(ToolCall("t"), lambda attempt: "still open") == "still open"
    scheduler.close()
    with pytest.raises(SchedulingError, match="closed"):
        scheduler.submit(ToolCall("t"), lambda attempt: "never")


async def test_an_async_tool_that_closes_its_own_scheduler_is_refused_not_left_waiting() -> None:
    scheduler = Scheduler(SchedulerConfig())
    said: list[BaseException] = []

    async def tool(attempt: Attempt) -> str:
        try:
            await scheduler.aclose()
        except SchedulingError as exc:
            said.append(exc)
        return "returned"

    assert await asyncio.wait_for(scheduler.submit(ToolCall("t"), tool), WAIT_S) == "returned"
    assert [str(exc).startswith("Scheduler.aclose from a call it is running") for exc in said] == [True]
    assert await scheduler.submit(ToolCall("t"), lambda attempt: "still open") == "still open"
    await scheduler.aclose()
