"""Review R71: the dispatch after a finish without global, tenant or principal limits
(``SharedLimits._dispatch_tool``) checks a tool's concurrency and wakes a waiter of its own
loop's thread inline, no longer through ``_tool_open`` and ``_wake``. These hold each of its
branches to what the general ones did: a waiter whose caller was cancelled before its turn is
skipped and the slot goes to the next; a waiter of another thread's loop is woken there; the
slot count ends at zero."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine

from agentgate.tasks import Scheduler, SchedulerConfig, SharedLimits, ToolCall, ToolLimits

CONFIG = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


async def test_a_waiter_cancelled_before_its_turn_is_skipped_and_the_next_starts() -> None:
    """Review R71: the finish that pops a waiter whose future its cancellation already settled
    (its task has not run since) must drop it and start the next one, in order."""
    scheduler = Scheduler(CONFIG)
    release = asyncio.Event()
    started: list[str] = []

    def tool(name: str, wait: bool = False) -> Callable[[object], Coroutine[None, None, str]]:
        async def run(_attempt: object) -> str:
            started.append(name)
            if wait:
                await release.wait()
            return name

        return run

    first = asyncio.ensure_future(scheduler.submit(ToolCall("t"), tool("first", wait=True)))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(scheduler.submit(ToolCall("t"), tool("second")))
    third = asyncio.ensure_future(scheduler.submit(ToolCall("t"), tool("third")))
    for _ in range(3):
        await asyncio.sleep(0)
    assert started == ["first"] and scheduler.queued == 2
    # In one step: the first call's wake is scheduled before the second's cancellation runs, so
    # its finish pops the second while that one's future is already cancelled.
    release.set()
    second.cancel()
    assert await first == "first"
    assert await third == "third"
    assert second.cancelled()
    assert started == ["first", "third"]
    assert scheduler.queued == 0 and scheduler.in_flight == 0
    assert scheduler.shared.tool_in_flight == {}
    await scheduler.aclose()


def test_a_slot_given_back_on_one_loop_starts_a_waiter_of_another_threads_loop() -> None:
    """Review R71: a waiter of another thread's loop is woken on its loop (not resolved from
    the finishing thread), and both loops' calls end with the slot counts at zero."""
    limits = SharedLimits(CONFIG)
    holding = threading.Event()
    release = threading.Event()
    results: list[str] = []

    def holder() -> None:
        async def main() -> None:
            scheduler = Scheduler(limits=limits)

            async def run(_attempt: object) -> str:
                holding.set()
                await asyncio.to_thread(release.wait)
                return "held"

            results.append(await scheduler.submit(ToolCall("t"), run))
            await scheduler.aclose()

        asyncio.run(main())

    def waiter() -> None:
        async def main() -> None:
            scheduler = Scheduler(limits=limits)

            async def run(_attempt: object) -> str:
                return "waited"

            call = asyncio.ensure_future(scheduler.submit(ToolCall("t"), run))
            while limits.queued == 0:
                await asyncio.sleep(0.001)
            release.set()
            results.append(await call)
            await scheduler.aclose()

        asyncio.run(main())

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(10)
    second = threading.Thread(target=waiter)
    second.start()
    first.join(10)
    second.join(10)
    assert sorted(results) == ["held", "waited"]
    assert limits.in_flight == 0 and limits.tool_in_flight == {} and limits.queued == 0
    limits.close()
