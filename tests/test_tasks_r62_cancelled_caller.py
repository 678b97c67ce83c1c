"""Review R62: a caller that was cancelled while its tool ran is not retried for.

A tool that catches its caller's cancellation and raises an error of its own instead (a
transient one, which ``retry_on`` lists) was run again for a caller that had left. The tool now
runs once and the caller gets its ``CancelledError``, whether the caller's task was cancelled
directly, by its own ``asyncio.timeout``, or by a ``TaskGroup`` whose other child failed. A tool
whose own ``TaskGroup`` fails (which on Python 3.11 leaves the task's ``cancelling()`` count
raised, tests/test_tasks_r61_safe_retries.py) is still a failed attempt, retried by its policy.
Real schedulers; no mocks.
"""

from __future__ import annotations

import asyncio

import pytest

from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    ToolCall,
    ToolLimits,
)

WAIT_S = 10.0  # bound on every wait: only a bug comes near it


def _scheduler() -> Scheduler:
    """An idempotent tool retried on every transient failure, at once, its breaker never opening."""
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.0, retry_on=("transient", "connection"))
    return Scheduler(
        SchedulerConfig(
            tools={"t": ToolLimits(idempotent=True, retry=retry)},
            breaker=BreakerPolicy(failure_threshold=100),
        )
    )


class _Tool:
    """A tool that turns its caller's cancellation into a transient error of its own."""

    def __init__(self) -> None:
        self.runs: list[int] = []
        self.started = asyncio.Event()

    async def __call__(self, attempt: Attempt) -> str:
        self.runs.append(attempt.number)
        self.started.set()
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            raise ConnectionRefusedError("the connection went away") from None
        return "done"


async def test_a_cancelled_caller_gets_its_cancellation_and_the_tool_runs_once() -> None:
    """Review R62: ``task.cancel()`` of the caller while its tool ran, the tool raising a
    transient error instead of the cancellation: the call is not retried (it was, twice more), the
    caller's task ends cancelled, and nothing is held or dead-lettered."""
    scheduler = _scheduler()
    tool = _Tool()
    caller = asyncio.ensure_future(scheduler.submit(ToolCall("t"), tool))
    await asyncio.wait_for(tool.started.wait(), WAIT_S)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert tool.runs == [1]
    assert caller.cancelled()
    assert scheduler.dead_letters() == []
    assert (scheduler.in_flight, scheduler.queued) == (0, 0)
    await scheduler.aclose()


async def test_a_callers_own_timeout_ends_in_timeout_error_and_the_tool_runs_once() -> None:
    """Review R62: the caller's own ``asyncio.timeout`` around the call cancels it; the tool that
    turns that into a transient error is not run again, and the caller's timeout raises
    ``TimeoutError`` as it does for any awaited work."""
    scheduler = _scheduler()
    tool = _Tool()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await scheduler.submit(ToolCall("t"), tool)
    assert tool.runs == [1]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await scheduler.aclose()


async def test_a_task_group_whose_other_child_fails_cancels_the_call_without_a_retry() -> None:
    """Review R62: a call in a ``TaskGroup`` whose other child fails is cancelled by the group;
    its tool, turning that into a transient error, ran again for a group that had given up.
    It now runs once, and the group raises only its failed child's error."""
    scheduler = _scheduler()
    tool = _Tool()

    async def failing() -> None:
        await asyncio.wait_for(tool.started.wait(), WAIT_S)
        raise ValueError("sibling failed")

    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.TaskGroup() as group:
            call = group.create_task(scheduler.submit(ToolCall("t"), tool))
            group.create_task(failing())
    assert [type(error) for error in caught.value.exceptions] == [ValueError]
    assert call.cancelled()
    assert tool.runs == [1]
    assert (scheduler.in_flight, scheduler.queued) == (0, 0)
    await scheduler.aclose()


async def test_a_tool_failing_on_its_own_after_a_cancellation_it_handled_is_still_retried() -> None:
    """Review R62: the cancellation rule reads the caller's task, not the error alone: a tool
    whose error carries a ``CancelledError`` of another task (an inner task someone else
    cancelled) while its caller was not cancelled is a failed attempt, retried by its policy."""
    scheduler = _scheduler()
    runs: list[int] = []

    async def tool(attempt: Attempt) -> str:
        runs.append(attempt.number)
        if attempt.number == 1:
            inner = asyncio.ensure_future(asyncio.sleep(WAIT_S))
            inner.cancel()
            try:
                await inner
            except asyncio.CancelledError:
                raise ConnectionRefusedError("the inner request was dropped") from None
        return "done"

    assert await scheduler.submit(ToolCall("t"), tool) == "done"
    assert runs == [1, 2]
    await scheduler.aclose()


async def test_a_cancellation_turned_into_an_error_raised_from_another_is_still_the_callers() -> None:
    """Review R62: a tool that raises ``ConnectionResetError(...) from its_own_error`` while
    handling its caller's cancellation has the cancellation as context, not as cause: the rule
    follows both links, and the caller still gets its cancellation (with its message)."""
    scheduler = _scheduler()
    runs: list[int] = []
    started = asyncio.Event()

    async def tool(attempt: Attempt) -> None:
        runs.append(attempt.number)
        started.set()
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            raise ConnectionResetError("closed while sending") from OSError("socket closed")

    caller = asyncio.ensure_future(scheduler.submit(ToolCall("t"), tool))
    await asyncio.wait_for(started.wait(), WAIT_S)
    caller.cancel("the user left")
    with pytest.raises(asyncio.CancelledError, match="the user left"):
        await caller
    assert runs == [1]
    await scheduler.aclose()
