"""Who runs when, as docs/tasks.md ("Order", "Limits", "Across processes")
promises it to an operator of a multi-tenant deployment."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    PriorityClass,
    Scheduler,
    SchedulerConfig,
    TenantShare,
    ToolCall,
    ToolLimits,
)
from agentgate.tasks._fair import Entry, FairQueue

DOCS = Path(__file__).resolve().parent.parent / "docs" / "tasks.md"


async def test_a_tenant_whose_calls_waited_for_a_full_tool_gets_its_share_not_every_turn() -> None:
    """Tenant a waits for tool x (held at its limit) while tenant b runs 20 calls of tool y; then
    a floods y. Both now wait for y: they alternate, a does not take 20 turns in a row."""
    config = SchedulerConfig(tools={"x": ToolLimits(concurrency=1), "y": ToolLimits(concurrency=1)})
    scheduler = Scheduler(config)
    order: list[str] = []
    hold_x = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await hold_x.wait()

    async def quick(attempt: Attempt) -> None:
        order.append(attempt.call.tenant)
        await asyncio.sleep(0)

    def submit(tool: str, tenant: str, fn: Callable[[Attempt], Awaitable[None]]) -> asyncio.Task[None]:
        return asyncio.create_task(scheduler.submit(ToolCall(tool, tenant=tenant, principal=tenant), fn))

    held = [submit("x", "a", hold)]
    await asyncio.sleep(0)
    held.append(submit("x", "a", hold))  # waits for x: tenant a has a call waiting from here on
    await asyncio.sleep(0)
    flood = [submit("y", "b", quick) for _ in range(40)]
    while len(order) < 20:
        await asyncio.sleep(0)
    late = [submit("y", "a", quick) for _ in range(20)]
    await asyncio.gather(*late, *flood)
    after = order[order.index("a") :][:20]  # the starts while both tenants wait for y
    assert after.count("b") >= 9, "".join(order)
    hold_x.set()
    await asyncio.gather(*held)
    await scheduler.aclose()


@pytest.mark.parametrize("level", ["class", "tenant", "agent"])
def test_a_member_skipped_while_its_calls_could_not_start_comes_back_without_saved_credit(level: str) -> None:
    """At each level of the tree: member m1 waits only for a tool that cannot start (full, out of
    tokens) while m2 is served 20 times; when m1's calls to the open tool come, the two alternate."""

    def push(queue: FairQueue[str], member: str, tool: str) -> None:
        keys = {"class": "c", "tenant": "t", "agent": "p", level: member}
        queue.push_entry(Entry(member), 0, keys["class"], 1.0, keys["tenant"], 1.0, keys["agent"], tool)

    queue: FairQueue[str] = FairQueue()
    push(queue, "m1", "x")
    for _ in range(40):
        push(queue, "m2", "y")
    assert [queue.pop({"y"}, None, None) for _ in range(20)] == ["m2"] * 20
    for _ in range(20):
        push(queue, "m1", "y")
    served = [queue.pop({"y"}, None, None) for _ in range(20)]
    assert served.count("m2") >= 9, served


async def _peak_of_two_schedulers(store: SQLiteStore, config: SchedulerConfig, wait_s: float) -> int:
    """How many of two calls (one per scheduler on ``store``, as two processes) run at once,
    waiting up to ``wait_s`` for both to be running."""
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)
    running = peak = 0
    both = asyncio.Event()
    release = asyncio.Event()

    async def tool(attempt: Attempt) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if peak == 2:
            both.set()
        try:
            await release.wait()
        finally:
            running -= 1

    calls = [
        asyncio.create_task(s.submit(ToolCall("t", tenant="a", principal="p"), tool)) for s in (first, second)
    ]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(both.wait(), wait_s)
    release.set()
    await asyncio.gather(*calls)
    await first.aclose()
    await second.aclose()
    return peak


async def test_global_tenant_and_principal_limits_are_per_process_as_the_docs_say(tmp_path: Path) -> None:
    """Two schedulers on one store stand for two processes: only a tool's own concurrency limit
    holds across them (a lease per slot); docs/tasks.md must not let an operator think otherwise."""
    store = SQLiteStore(tmp_path / "agentgate.db")
    try:
        # The tool's second call waits for the lease while the first runs: never two at once.
        assert (
            await _peak_of_two_schedulers(store, SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}), 1.0)
            == 1
        )
        for config in (
            SchedulerConfig(max_concurrency=1),
            SchedulerConfig(tenant=TenantShare(concurrency=1)),
            SchedulerConfig(principal_concurrency=1),
        ):
            assert await _peak_of_two_schedulers(store, config, 10.0) == 2
    finally:
        store.close()
    text = " ".join(DOCS.read_text().split())
    per_process = re.search(r"Not shared across processes: (.*?) \(per process\)", text)
    assert per_process is not None
    for limit in ("max_concurrency", "TenantShare.concurrency", "principal_concurrency"):
        assert limit in per_process.group(1), per_process.group(1)


async def test_a_higher_rank_number_waits_while_lower_rank_calls_keep_coming() -> None:
    """Rank is strict (docs/tasks.md, "Order"): a call of rank 1 that waits first still starts
    only after every rank-0 call, also those that arrive while it waits."""
    config = SchedulerConfig(
        max_concurrency=1, priority_classes=(PriorityClass("default", 0), PriorityClass("batch", 1))
    )
    scheduler = Scheduler(config)
    order: list[str] = []
    hold = asyncio.Event()
    feeders: list[asyncio.Task[None]] = []

    async def first(attempt: Attempt) -> None:
        await hold.wait()

    async def urgent(attempt: Attempt) -> None:
        order.append("urgent")
        if len(order) < 30:  # a steady load: each urgent call brings the next one
            feeders.append(asyncio.create_task(scheduler.submit(ToolCall("x"), urgent)))
            await asyncio.sleep(0)  # the next one queues before this one's slot comes free

    async def batch(attempt: Attempt) -> None:
        order.append("batch")

    running = asyncio.create_task(scheduler.submit(ToolCall("x"), first))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(scheduler.submit(ToolCall("x", priority="batch"), batch))
    await asyncio.sleep(0)
    feeders.append(asyncio.create_task(scheduler.submit(ToolCall("x"), urgent)))
    await asyncio.sleep(0)
    hold.set()
    await asyncio.gather(running, waiting)
    await asyncio.gather(*feeders)
    assert order == ["urgent"] * 30 + ["batch"]
    await scheduler.aclose()
