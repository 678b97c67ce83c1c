"""Review R59: a queued twin (a keyed call that more urgent calls with the same idempotency key
joined) waits at the most urgent class among the callers still waiting on it: when an urgent
joiner stops waiting (cancelled, its deadline passed), the twin goes back down, to the place its
first arrival gives it.

Real schedulers (the async core, and the sync facade with and without a store) and the real fair
queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from _sync_callers import SyncCallers

from agentgate.errors import DeadlineExceeded
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, PriorityClass, Scheduler, SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._fair import Entry, FairQueue

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
JOINER_DEADLINE_S = 0.3  # the urgent joiner's own deadline, which passes while the twin waits
CLASSES = (PriorityClass("urgent", 0), PriorityClass("normal", 1), PriorityClass("low", 2))
CONFIG = SchedulerConfig(max_concurrency=1, priority_classes=CLASSES, default_priority="normal")


def _keyed(priority: str, deadline: float | None = None) -> ToolCall:
    return ToolCall("x", {"q": 1}, priority=priority, run_id="run", call_id="call-1", deadline=deadline)


class _Calls:
    """Tools that note the order they ran in, and one that holds the only slot until let go."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.gate = asyncio.Event()

    async def hold(self, attempt: Attempt) -> str:
        await self.gate.wait()
        return "held"

    def named(self, name: str) -> Callable[[Attempt], Awaitable[str]]:
        async def tool(attempt: Attempt) -> str:
            self.order.append(name)
            return name

        return tool


async def test_a_twin_goes_back_to_its_place_when_its_urgent_joiner_is_cancelled() -> None:
    """Review R59: the class an urgent joiner raised its queued twin to stayed raised after the
    joiner was cancelled (the twin ran before normal calls queued ahead of it); it now goes back
    to its own class, at its place of arrival (after the normal call queued before it, before
    the one queued after)."""
    scheduler = Scheduler(CONFIG)
    calls = _Calls()
    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), calls.hold))
    await asyncio.sleep(0)
    first = asyncio.create_task(scheduler.submit(ToolCall("x"), calls.named("normal-0")))
    await asyncio.sleep(0)
    twin = asyncio.create_task(scheduler.submit(_keyed("normal"), calls.named("twin")))
    await asyncio.sleep(0)
    last = asyncio.create_task(scheduler.submit(ToolCall("x"), calls.named("normal-1")))
    await asyncio.sleep(0)
    urgent = asyncio.create_task(scheduler.submit(_keyed("urgent"), calls.named("never runs")))
    await asyncio.sleep(0)
    assert scheduler.shared.queue.rank_of(scheduler._twin_waiters[_keyed("normal").idempotency_key()]) == 0
    urgent.cancel()
    with pytest.raises(asyncio.CancelledError):
        await urgent
    assert scheduler.queued == 3  # counted once throughout
    calls.gate.set()
    async with asyncio.timeout(WAIT_S):
        assert await twin == "twin"
        await asyncio.gather(holder, first, last)
    assert calls.order == ["normal-0", "twin", "normal-1"]
    assert scheduler.metrics.count("queued", "x") == 3
    assert scheduler.queued == 0 and scheduler.shared.queue.tenant_sizes == {}
    await scheduler.aclose()


async def test_a_twin_keeps_the_class_of_the_joiners_still_waiting() -> None:
    """Review R59: of two joiners, the urgent one's deadline passed and the normal one waits on:
    the low twin waits at the normal class (before, at the urgent one's for good), at the place
    its first arrival gives it among the normal calls."""
    scheduler = Scheduler(CONFIG)
    calls = _Calls()
    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), calls.hold))
    await asyncio.sleep(0)
    first = asyncio.create_task(scheduler.submit(ToolCall("x"), calls.named("normal-0")))
    await asyncio.sleep(0)
    twin = asyncio.create_task(scheduler.submit(_keyed("low"), calls.named("twin")))
    await asyncio.sleep(0)
    last = asyncio.create_task(scheduler.submit(ToolCall("x"), calls.named("normal-1")))
    await asyncio.sleep(0)
    normal = asyncio.create_task(scheduler.submit(_keyed("normal"), calls.named("never runs")))
    urgent = asyncio.create_task(
        scheduler.submit(_keyed("urgent", time.time() + JOINER_DEADLINE_S), calls.named("never runs"))
    )
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(DeadlineExceeded):
            await urgent
        calls.gate.set()
        assert await twin == await normal == "twin"
        await asyncio.gather(holder, first, last)
    assert calls.order == ["normal-0", "twin", "normal-1"]
    await scheduler.aclose()


@pytest.mark.parametrize("with_store", [False, True])
def test_a_sync_twin_goes_back_down_when_its_urgent_joiner_leaves(with_store: bool, tmp_path: Path) -> None:
    """Review R59: under SyncScheduler too, a low twin an urgent joiner raised stayed urgent after
    the joiner's deadline passed, and ran before the normal calls; it now goes back to the low
    class. (With a store the calls are scheduled by the async core, without one in the callers'
    threads.)"""
    store = SQLiteStore(tmp_path / "s.db") if with_store else None
    scheduler = SyncScheduler(CONFIG, store=store)
    core = scheduler.scheduler
    order: list[str] = []
    callers = SyncCallers(scheduler, WAIT_S)
    outcomes, release, holding = callers.outcomes, callers.release, callers.holding
    hold, submit, until = callers.hold, callers.submit, callers.until

    def named(name: str) -> Callable[[Attempt], str]:
        def tool(attempt: Attempt) -> str:
            order.append(name)
            return name

        return tool

    try:
        threads = [submit("holder", ToolCall("x"), hold)]
        until(holding.is_set)
        threads.append(submit("low", _keyed("low"), named("twin")))
        until(lambda: core.queued == 1)
        threads.append(submit("normal-0", ToolCall("x"), named("normal-0")))
        until(lambda: core.queued == 2)  # one at a time: they queue in this order
        threads.append(submit("normal-1", ToolCall("x"), named("normal-1")))
        until(lambda: core.queued == 3)
        urgent = submit("urgent", _keyed("urgent", time.time() + JOINER_DEADLINE_S), named("never runs"))
        urgent.join(WAIT_S)
        release.set()
        for thread in threads:
            thread.join(WAIT_S)
    finally:
        release.set()
        scheduler.close()
        if store is not None:
            store.close()
    assert core.metrics.count("reused", "x") == 1
    assert isinstance(outcomes["urgent"], DeadlineExceeded)
    assert outcomes["low"] == "twin"
    assert order == ["normal-0", "normal-1", "twin"]


def test_an_entry_moved_back_takes_the_place_of_its_first_arrival() -> None:
    """Review R59: an entry moved up and then back (``back=True``) is served in its first
    arrival's place among the entries of its old class, counted once throughout."""
    queue: FairQueue[str] = FairQueue()
    entries = {name: Entry(name) for name in ("before", "moved", "after")}
    for entry in entries.values():
        queue.push_entry(entry, 2, "low", 1.0, "t", 1.0, "a", "x")
    moved = entries["moved"]
    queue.move(moved, 0, "urgent", 1.0, 1.0)
    queue.move(moved, 1, "normal", 1.0, 1.0)  # a second, less urgent joiner's class: still the tail
    queue.move(moved, 2, "low", 1.0, 1.0, back=True)
    assert queue.size == 3 and queue.tenant_sizes == {"t": 3} and queue.tool_sizes == {"x": 3}
    assert [queue.pop({"x"}, None, None) for _ in range(3)] == ["before", "moved", "after"]
    assert queue.pop({"x"}, None, None) is None
    assert queue.size == 0 and queue.tenant_sizes == {} and queue.tool_sizes == {}
