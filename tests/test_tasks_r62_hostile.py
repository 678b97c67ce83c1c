"""Review R62: hostile inputs to the scheduler.

Rate limits at the edge of what a float holds, a flood of one tenant's queued calls cancelled at
once, and a deadline that has passed before the call is submitted. Real schedulers (and a real
SQLite store for the cross-process rate and lease state); no mocks.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentgate.errors import DeadlineExceeded, InputError
from agentgate.store import open_store
from agentgate.tasks import (
    Attempt,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
FLOOD = 10_000


@pytest.mark.parametrize(
    ("per_second", "burst", "field"),
    [
        (0, 1, "rate.per_second"),
        (-1.0, 1, "rate.per_second"),
        (math.nan, 1, "rate.per_second"),
        (math.inf, 1, "rate.per_second"),
        (10**400, 1, "rate.per_second"),
        (True, 1, "rate.per_second"),
        ("5", 1, "rate.per_second"),
        (1.0, 0, "rate.burst"),
        (1.0, -3, "rate.burst"),
        (1.0, 2**53 + 1, "rate.burst"),
        (1.0, 2**2000, "rate.burst"),
        (1.0, 1.5, "rate.burst"),
    ],
)
def test_a_rate_limit_that_cannot_hold_is_refused_naming_its_field(
    per_second: object, burst: object, field: str
) -> None:
    """Review R62: a rate of 0, below 0, NaN, infinite, an integer no float holds, a bool or a
    string, and a burst below 1, past 2**53 or fractional, are refused when the limit is made,
    with an ``InputError`` naming the field (never a scheduler that starts with it)."""
    with pytest.raises(InputError, match=field):
        RateLimit(per_second=per_second, burst=burst)  # type: ignore[arg-type]


async def test_the_largest_rate_and_burst_run_every_call_at_once() -> None:
    """Review R62: a rate of 1e308 per second with the largest burst is a documented meaning
    (no practical bound): every call runs, none waits, and no token arithmetic overflows."""
    limits = ToolLimits(rate=RateLimit(per_second=1e308, burst=2**53))
    scheduler = Scheduler(SchedulerConfig(tools={"t": limits}))

    async def tool(attempt: Attempt) -> int:
        return attempt.number

    assert await asyncio.gather(*(scheduler.submit(ToolCall("t"), tool) for _ in range(200))) == [1] * 200
    assert scheduler.queued == 0
    await scheduler.aclose()


@pytest.mark.parametrize("shared", [False, True], ids=["in-process", "sqlite-store"])
async def test_the_smallest_rate_waits_until_the_deadline_and_no_longer(shared: bool, tmp_path: Path) -> None:
    """Review R62: a rate of 5e-324 per second (the smallest float: one token per 6e315 years, a
    wait that is infinite as a float) grants its burst, then a call waits for a token until its
    deadline and fails there with ``DeadlineExceeded``, in process and across processes."""
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}") if shared else None
    limits = ToolLimits(rate=RateLimit(per_second=5e-324, burst=1))
    scheduler = Scheduler(SchedulerConfig(tools={"t": limits}), store=store)
    runs: list[int] = []

    async def tool(attempt: Attempt) -> None:
        runs.append(attempt.number)

    try:
        await scheduler.submit(ToolCall("t"), tool)
        with pytest.raises(DeadlineExceeded):
            await scheduler.submit(ToolCall("t", deadline=time.time() + 0.2), tool)
        assert runs == [1]
        assert (scheduler.queued, scheduler.in_flight) == (0, 0)
    finally:
        await scheduler.aclose()
        if store is not None:
            store.close()


async def test_ten_thousand_queued_calls_of_one_tenant_cancelled_at_once_hold_nothing() -> None:
    """Review R62: 10,000 calls of one tenant queued behind a running call, all cancelled at once:
    afterwards no call waits, no slot is held but the running call's, no rate token was spent on
    a call that never started, and the next call starts at once."""
    limits = ToolLimits(concurrency=1, rate=RateLimit(per_second=1.0, burst=5))
    scheduler = Scheduler(SchedulerConfig(tools={"t": limits}))
    release = asyncio.Event()
    runs: list[str] = []

    async def tool(attempt: Attempt) -> str:
        runs.append(attempt.call.call_id or "")
        await release.wait()
        return "ok"

    holder = asyncio.ensure_future(scheduler.submit(ToolCall("t", tenant="a", call_id="first"), tool))
    while not runs:
        await asyncio.sleep(0)
    flood = [
        asyncio.ensure_future(scheduler.submit(ToolCall("t", tenant="a", call_id=str(n)), tool))
        for n in range(FLOOD)
    ]
    while scheduler.queued < FLOOD:
        await asyncio.sleep(0)
    for call in flood:
        call.cancel()
    done, _ = await asyncio.wait(flood, timeout=WAIT_S)
    assert len(done) == FLOOD and all(call.cancelled() for call in flood)
    assert (scheduler.queued, scheduler.in_flight) == (0, 1)
    assert scheduler.shared.queue.tenant_sizes.get("a", 0) == 0
    release.set()
    assert await asyncio.wait_for(holder, WAIT_S) == "ok"
    assert scheduler.in_flight == 0
    assert scheduler.shared.tool_in_flight.get("t", 0) == 0
    assert scheduler.shared.tenant_in_flight.get("a", 0) == 0
    assert scheduler.shared.buckets["t"].level >= 3.9  # one token spent, by the holder only
    assert await asyncio.wait_for(scheduler.submit(ToolCall("t", tenant="a"), tool), WAIT_S) == "ok"
    assert runs == ["first", ""]
    await scheduler.aclose()


async def test_queued_calls_cancelled_at_once_give_back_their_store_leases(tmp_path: Path) -> None:
    """Review R62: with a store, calls queued for a cross-process slot and cancelled at once leave
    no lease held: the next call takes the slot at once, and closing gives back every lease."""
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}), store=store)
    release = asyncio.Event()
    started = asyncio.Event()

    async def tool(attempt: Attempt) -> str:
        started.set()
        await release.wait()
        return "ok"

    try:
        holder = asyncio.ensure_future(scheduler.submit(ToolCall("t", tenant="a"), tool))
        await asyncio.wait_for(started.wait(), WAIT_S)
        flood = [asyncio.ensure_future(scheduler.submit(ToolCall("t", tenant="a"), tool)) for _ in range(500)]
        while scheduler.queued < len(flood):
            await asyncio.sleep(0)
        for call in flood:
            call.cancel()
        await asyncio.wait(flood, timeout=WAIT_S)
        release.set()
        assert await asyncio.wait_for(holder, WAIT_S) == "ok"
        release.clear()
        started.clear()
        second = asyncio.ensure_future(
            scheduler.submit(ToolCall("t", tenant="a", deadline=time.time() + 2), tool)
        )
        await asyncio.wait_for(started.wait(), WAIT_S)  # the one cross-process slot was free
        release.set()
        assert await second == "ok"
        with store.transaction() as tx:
            held = tx.execute("SELECT COUNT(*) FROM agentgate_leases")[0][0]
        assert held == 0
    finally:
        await scheduler.aclose()
        store.close()


@pytest.mark.parametrize(
    "call",
    [
        ToolCall("t", deadline=time.time() - 1),
        ToolCall("t", deadline=datetime.now(UTC) - timedelta(seconds=1)),
        ToolCall("t", grant_expires_at=time.time() - 1),
        ToolCall("t", deadline=0.0),
        ToolCall("t", run_id="run", call_id="c1", deadline=time.time() - 1),
    ],
    ids=["unix", "datetime", "grant-expired", "epoch", "keyed"],
)
async def test_a_call_whose_deadline_passed_before_it_was_submitted_is_refused_unrun(call: ToolCall) -> None:
    """Review R62: a deadline (or grant expiry) already passed when the call is submitted is
    refused with ``DeadlineExceeded`` naming the tool, before the tool runs, with no dead letter
    and nothing held, on the async core and the sync facade."""
    runs: list[int] = []

    async def tool(attempt: Attempt) -> None:
        runs.append(attempt.number)

    def sync_tool(attempt: Attempt) -> None:
        runs.append(attempt.number)

    scheduler = Scheduler(SchedulerConfig())
    with pytest.raises(DeadlineExceeded, match="tool t"):
        await scheduler.submit(call, tool)
    assert (scheduler.dead_letters(), scheduler.in_flight, scheduler.queued) == ([], 0, 0)
    await scheduler.aclose()
    sync = SyncScheduler(SchedulerConfig())
    try:
        with pytest.raises(DeadlineExceeded, match="tool t"):
            sync.submit(call, sync_tool)
    finally:
        sync.close()
    assert runs == []
