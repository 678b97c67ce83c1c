"""A keyed call whose event loop was closed under it can never end: a later call with its key, on
any live loop, forgets it and runs (review R86b: it was refused with ``SchedulingError`` "runs on
another event loop ... call again once it has ended", for ever). The forgotten call's coroutine,
closed when it is collected, leaves the bookkeeping of the call now running under its key alone."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, ToolCall

CALL = ToolCall("t", run_id="r", call_id="c")


async def _hang(_attempt: Attempt) -> str:
    await asyncio.sleep(3600)
    return "never"


def _start_on_a_loop_then_close_it(scheduler: Scheduler) -> list[Coroutine[Any, Any, Any]]:
    """Start ``CALL`` and a call joined to it on a loop of their own and close that loop under
    them; their coroutines."""
    loop = asyncio.new_event_loop()
    tasks = [loop.create_task(scheduler.submit(CALL, _hang)) for _ in range(2)]
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    return [task.get_coro() for task in tasks]  # type: ignore[misc]


def _collect(coroutines: list[Coroutine[Any, Any, Any]]) -> None:
    """Close ``coroutines`` as the collector does, for the tasks of a closed loop."""
    for coroutine in coroutines:
        coroutine.close()


def test_a_call_whose_twin_loop_was_closed_runs() -> None:
    scheduler = Scheduler(SchedulerConfig())
    dead = _start_on_a_loop_then_close_it(scheduler)

    async def again() -> list[str]:
        async def quick(_attempt: Attempt) -> str:
            return "ran"

        try:
            return [await scheduler.submit(CALL, quick) for _ in range(2)]
        finally:
            await scheduler.aclose()

    assert asyncio.run(again()) == ["ran", "ran"]
    _collect(dead)


def test_the_dead_call_collected_leaves_the_live_twin_joinable() -> None:
    scheduler = Scheduler(SchedulerConfig())
    dead = _start_on_a_loop_then_close_it(scheduler)
    runs: list[int] = []

    async def live() -> list[str]:
        release = asyncio.Event()

        async def tool(_attempt: Attempt) -> str:
            runs.append(1)
            await release.wait()
            return "live"

        first = asyncio.create_task(scheduler.submit(CALL, tool))
        await asyncio.sleep(0.01)  # running, with the key
        _collect(dead)  # their cleanup must leave the live call's entry and callers alone
        second = asyncio.create_task(scheduler.submit(CALL, tool))
        await asyncio.sleep(0.01)
        third = asyncio.create_task(scheduler.submit(CALL, tool))
        await asyncio.sleep(0.01)
        release.set()
        try:
            return list(await asyncio.gather(first, second, third))
        finally:
            await scheduler.aclose()

    assert asyncio.run(live()) == ["live", "live", "live"]
    assert runs == [1]  # the later calls joined the first
