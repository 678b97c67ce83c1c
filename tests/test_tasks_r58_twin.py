"""Review R58: a keyed call joined, while it waits in the fair queue, by a more urgent call with
the same idempotency key (its twin).

Real schedulers (the async core and the sync facade's direct mode) and the real fair queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    PriorityClass,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)
from agentgate.tasks._fair import Entry, FairQueue

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
CLASSES = (PriorityClass("urgent", 0), PriorityClass("normal", 1), PriorityClass("low", 2))
CONFIG = SchedulerConfig(max_concurrency=1, priority_classes=CLASSES, default_priority="normal")


def _keyed(priority: str) -> ToolCall:
    return ToolCall("x", {"q": 1}, priority=priority, run_id="run", call_id="call-1")


async def test_an_urgent_call_joining_a_queued_low_twin_runs_it_before_normal_calls() -> None:
    """Review R58: an urgent call joining its queued low-class twin waited at the twin's rank,
    behind every normal call queued meanwhile; the twin now moves up to the urgent rank."""
    scheduler = Scheduler(CONFIG)
    order: list[str] = []
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> str:
        await gate.wait()
        return "held"

    def named(name: str) -> Callable[[Attempt], Awaitable[str]]:
        async def tool(attempt: Attempt) -> str:
            order.append(name)
            return name

        return tool

    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    low = asyncio.create_task(scheduler.submit(_keyed("low"), named("twin")))
    await asyncio.sleep(0)
    normals = [asyncio.create_task(scheduler.submit(ToolCall("x"), named(f"normal-{i}"))) for i in range(3)]
    await asyncio.sleep(0)
    urgent = asyncio.create_task(scheduler.submit(_keyed("urgent"), named("never runs")))
    await asyncio.sleep(0)
    assert scheduler.queued == 4  # the twin (once), and the three normal calls
    gate.set()
    async with asyncio.timeout(WAIT_S):
        assert await urgent == "twin"
        assert await low == "twin"
        await asyncio.gather(holder, *normals)
    assert order == ["twin", "normal-0", "normal-1", "normal-2"]
    # Moved, not queued again: one queued and one started for the twin, one joined.
    assert scheduler.metrics.count("queued", "x") == 4
    assert scheduler.metrics.count("started", "x") == 5
    assert scheduler.metrics.count("reused", "x") == 1
    assert scheduler.queued == 0
    assert scheduler.shared.queue.tenant_sizes == {}
    await scheduler.aclose()


async def test_a_less_urgent_joiner_leaves_its_twin_where_it_waits() -> None:
    """Review R58: only a more urgent joiner moves a queued twin; a low one joining a normal twin
    leaves it at the normal rank (it starts in its arrival order among the normal calls)."""
    scheduler = Scheduler(CONFIG)
    order: list[str] = []
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    def named(name: str) -> Callable[[Attempt], Awaitable[str]]:
        async def tool(attempt: Attempt) -> str:
            order.append(name)
            return name

        return tool

    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    first = asyncio.create_task(scheduler.submit(ToolCall("x"), named("normal-0")))
    await asyncio.sleep(0)
    twin = asyncio.create_task(scheduler.submit(_keyed("normal"), named("twin")))
    await asyncio.sleep(0)
    last = asyncio.create_task(scheduler.submit(ToolCall("x"), named("normal-1")))
    await asyncio.sleep(0)
    joiner = asyncio.create_task(scheduler.submit(_keyed("low"), named("never runs")))
    await asyncio.sleep(0)
    gate.set()
    async with asyncio.timeout(WAIT_S):
        assert await joiner == "twin"
        await asyncio.gather(holder, first, twin, last)
    assert order == ["normal-0", "twin", "normal-1"]
    await scheduler.aclose()


class Transient(Exception):
    error_class = "transient"


async def test_a_twin_joined_while_it_runs_retries_at_the_joined_class() -> None:
    """Review R58: a keyed call joined by an urgent call while its first attempt ran queued its
    retry at its own low class, behind every normal call; the retry now queues at the urgent
    class."""
    retry = RetryPolicy(attempts=2, backoff_initial_s=0.001, backoff_max_s=0.001)
    config = SchedulerConfig(
        max_concurrency=1,
        priority_classes=CLASSES,
        default_priority="normal",
        tools={"x": ToolLimits(retry=retry)},
    )
    scheduler = Scheduler(config)
    order: list[str] = []
    failing = asyncio.Event()
    release = asyncio.Event()

    async def twin(attempt: Attempt) -> str:
        order.append(f"twin-{attempt.number}")
        if attempt.number == 1:
            await failing.wait()
            raise Transient("try again")
        return "twin"

    def named(name: str) -> Callable[[Attempt], Awaitable[str]]:
        async def tool(attempt: Attempt) -> str:
            order.append(name)
            await release.wait()
            return name

        return tool

    low = asyncio.create_task(scheduler.submit(_keyed("low"), twin))
    await asyncio.sleep(0)
    normals = [asyncio.create_task(scheduler.submit(ToolCall("x"), named(f"normal-{i}"))) for i in range(3)]
    await asyncio.sleep(0)
    urgent = asyncio.create_task(scheduler.submit(_keyed("urgent"), named("never runs")))
    await asyncio.sleep(0)
    failing.set()  # normal-0 takes the slot; the twin backs off, then queues again
    async with asyncio.timeout(WAIT_S):
        while scheduler.metrics.count("queued", "x") < 4:
            await asyncio.sleep(0.001)
        release.set()
        assert await urgent == "twin"
        assert await low == "twin"
        await asyncio.gather(*normals)
    assert order == ["twin-1", "normal-0", "twin-2", "normal-1", "normal-2"]
    await scheduler.aclose()


@pytest.mark.parametrize("with_store", [False, True])
def test_an_urgent_sync_call_joining_a_queued_low_twin_runs_it_before_normal_calls(
    with_store: bool, tmp_path: Path
) -> None:
    """Review R58: under SyncScheduler too, an urgent call joining its queued low-class twin
    waited behind every normal call; the twin now moves up to the urgent rank. (With a store
    the calls are scheduled by the async core, without one in the callers' threads.)"""
    store = SQLiteStore(tmp_path / "s.db") if with_store else None
    scheduler = SyncScheduler(CONFIG, store=store)
    core = scheduler.scheduler
    order: list[str] = []
    results: dict[str, str] = {}
    release = threading.Event()
    holding = threading.Event()

    def hold(attempt: Attempt) -> str:
        holding.set()
        release.wait(WAIT_S)
        return "held"

    def named(name: str) -> Callable[[Attempt], str]:
        def tool(attempt: Attempt) -> str:
            order.append(name)
            return name

        return tool

    def submit(label: str, call: ToolCall, fn: Callable[[Attempt], str]) -> threading.Thread:
        def run() -> None:
            results[label] = scheduler.submit(call, fn)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def until(condition: Callable[[], bool]) -> None:
        end = time.monotonic() + WAIT_S
        while not condition() and time.monotonic() < end:
            time.sleep(0.001)
        assert condition()

    def queued(count: int) -> Callable[[], bool]:
        return lambda: core.queued == count

    try:
        threads = [submit("holder", ToolCall("x"), hold)]
        until(holding.is_set)
        threads.append(submit("low", _keyed("low"), named("twin")))
        until(queued(1))
        for i in range(3):  # one at a time: they queue in this order
            threads.append(submit(f"normal-{i}", ToolCall("x"), named(f"normal-{i}")))
            until(queued(2 + i))
        threads.append(submit("urgent", _keyed("urgent"), named("never runs")))
        until(lambda: core.metrics.count("reused", "x") == 1)
        release.set()
        for thread in threads:
            thread.join(WAIT_S)
    finally:
        release.set()
        scheduler.close()
        if store is not None:
            store.close()
    assert results["urgent"] == results["low"] == "twin"
    assert order == ["twin", "normal-0", "normal-1", "normal-2"]
    assert core.metrics.count("queued", "x") == 4
    assert core.metrics.count("started", "x") == 5
    assert core.queued == 0


def test_a_moved_entry_is_served_once_and_charged_once() -> None:
    """Review R58: an entry the fair queue moves to a more urgent rank leaves its old place (no
    second pop from its old FIFO), keeps the counts of one waiting item, and its tenant's pass
    grows once, at the rank it is served from."""
    queue: FairQueue[str] = FairQueue()
    moved = Entry("moved")
    queue.push_entry(moved, 2, "low", 1.0, "t", 1.0, "a", "x")
    other = Entry("other")
    queue.push_entry(other, 2, "low", 1.0, "t", 1.0, "a", "x")
    old_tenant = moved.path[2]
    queue.move(moved, 0, "urgent", 1.0, 1.0)
    assert queue.size == 2
    assert queue.tenant_sizes == {"t": 2} and queue.tool_sizes == {"x": 2}
    assert queue.pop({"x"}, None, None) == "moved"
    new_tenant = moved.path[2]
    assert new_tenant is not old_tenant
    assert new_tenant.pass_ == new_tenant.stride  # served once at the urgent rank
    assert queue.pop({"x"}, None, None) == "other"
    assert old_tenant.pass_ == old_tenant.stride  # served once at the low rank: "other" only
    assert queue.pop({"x"}, None, None) is None
    assert queue.size == 0 and queue.tenant_sizes == {} and queue.tool_sizes == {}
