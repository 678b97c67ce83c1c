"""Review R67: a flooding tenant whose queued calls are cancelled in bulk (its agent run aborted,
its client gone) neither takes the other tenants' share nor leaves anything behind in the fair
queue: cancelled calls are never charged (a pass grows only when a call starts), and the
flooder's calls that are left, or that come after, start at its share, not in a burst of
credit. Counted in positions (starts), not times; real schedulers, one slot.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentgate.errors import DeadlineExceeded
from agentgate.tasks import (
    Attempt,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    TenantShare,
    ToolCall,
    ToolLimits,
)

FLOOD = 1_000
KEPT = 30  # flood calls not cancelled
QUIET = 20
WAIT_S = 10.0  # bound on every wait: only a bug comes near it


def _config() -> SchedulerConfig:
    return SchedulerConfig(
        tools={"t": ToolLimits(concurrency=1)},
        tenants={"flood": TenantShare(), "quiet": TenantShare(weight=2.0), "other": TenantShare()},
    )


def _assert_share(order: list[str]) -> None:
    """While the quiet (weight 2) and other (weight 1) tenants both wait with the flood
    (weight 1), every prefix of the starts keeps to the weights within one call each."""
    last_quiet = max(i for i, tenant in enumerate(order, 1) if tenant == "quiet")
    last_other = max(i for i, tenant in enumerate(order, 1) if tenant == "other")
    both = min(last_quiet, last_other, max(i for i, t in enumerate(order, 1) if t == "flood"))
    for prefix in range(1, both + 1):
        quiet = order[:prefix].count("quiet")
        other = order[:prefix].count("other")
        flood = order[:prefix].count("flood")
        assert abs(quiet - 2 * flood) <= 3 and abs(other - flood) <= 2, (prefix, quiet, other, flood)


def _assert_empty(scheduler: Scheduler) -> None:
    shared = scheduler.shared
    assert shared.in_flight == 0 and shared.queue.size == 0
    assert not shared.queue.tenant_sizes and not shared.queue.tool_sizes
    for root in shared.queue._ranks.values():
        assert root.backlog == 0 and not root.tools  # backlog: its classes with calls waiting


@pytest.mark.parametrize("cancel_at", [0, 10])
async def test_a_flood_cancelled_in_bulk_keeps_the_other_tenants_shares(cancel_at: int) -> None:
    """Review R67: 1,000 calls of one tenant queued before those of two others (weights 2 and 1),
    all but 30 cancelled at once, before the slot is freed or after 10 starts: the starts keep to
    the weights within one call while all three wait, the flood's 30 start at its share (no
    burst), and the queue is empty afterwards."""
    scheduler = Scheduler(_config())
    order: list[str] = []
    release = asyncio.Event()
    step = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await release.wait()

    async def record(attempt: Attempt) -> None:
        order.append(attempt.call.tenant)
        if len(order) == cancel_at:
            await step.wait()  # holds the slot while the flood is cancelled

    holder = asyncio.create_task(scheduler.submit(ToolCall("t", tenant="flood"), hold))
    while scheduler.in_flight < 1:
        await asyncio.sleep(0)
    flood = [
        asyncio.create_task(scheduler.submit(ToolCall("t", tenant="flood"), record)) for _ in range(FLOOD)
    ]
    others = [
        asyncio.create_task(scheduler.submit(ToolCall("t", tenant=tenant), record))
        for _ in range(QUIET)
        for tenant in ("quiet", "other")
    ]
    while scheduler.queued < FLOOD + 2 * QUIET:
        await asyncio.sleep(0)
    if cancel_at:
        release.set()
        while len(order) < cancel_at:
            await asyncio.sleep(0)
    cancelled = [task for task in flood if not task.done()][KEPT:]
    for task in cancelled:
        task.cancel()
    release.set()
    step.set()
    await asyncio.wait_for(asyncio.gather(*cancelled, return_exceptions=True), WAIT_S)
    await asyncio.wait_for(asyncio.gather(holder, *others, *[t for t in flood if t not in cancelled]), WAIT_S)
    assert order.count("flood") == FLOOD - len(cancelled)
    assert order.count("quiet") == order.count("other") == QUIET
    _assert_share(order)
    _assert_empty(scheduler)
    # The flood comes back: level with the tenant served last, at its share again.
    order.clear()
    release.clear()
    holder = asyncio.create_task(scheduler.submit(ToolCall("t", tenant="other"), hold))
    while scheduler.in_flight < 1:
        await asyncio.sleep(0)
    again = [asyncio.create_task(scheduler.submit(ToolCall("t", tenant="flood"), record)) for _ in range(50)]
    again += [asyncio.create_task(scheduler.submit(ToolCall("t", tenant="quiet"), record)) for _ in range(20)]
    while scheduler.queued < 70:
        await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, *again), WAIT_S)
    first_quiet = order[:30]
    assert abs(first_quiet.count("quiet") - 20) <= 1, order  # two quiet starts per flood start
    _assert_empty(scheduler)
    await scheduler.aclose()


def test_sync_callers_of_a_flood_whose_deadlines_pass_in_bulk_keep_the_quiet_share() -> None:
    """Review R67: sync callers: 200 flood calls whose deadline passes while they wait (all at
    once), beside 20 flood calls without one and 20 quiet ones (weight 2): the quiet tenant
    keeps its share of the starts, and nothing is left in the queue."""
    scheduler = SyncScheduler(_config())
    core = scheduler.scheduler
    order: list[str] = []
    lock = threading.Lock()
    release = threading.Event()
    expired: list[str] = []

    def hold(attempt: Attempt) -> None:
        release.wait(WAIT_S)

    def record(attempt: Attempt) -> None:
        with lock:
            order.append(attempt.call.tenant)

    def caller(call: ToolCall) -> None:
        try:
            scheduler.submit(call, record if call.tool == "t" else hold)
        except DeadlineExceeded:
            with lock:
                expired.append(call.tenant)

    holder = threading.Thread(target=scheduler.submit, args=(ToolCall("t", tenant="other"), hold))
    holder.start()
    while core.in_flight < 1:
        time.sleep(0.001)
    soon = time.time() + 1.0
    calls = [ToolCall("t", tenant="flood", deadline=soon) for _ in range(200)]
    calls += [ToolCall("t", tenant="flood") for _ in range(20)]
    calls += [ToolCall("t", tenant="quiet") for _ in range(20)]
    threads = [threading.Thread(target=caller, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    end = time.monotonic() + WAIT_S
    # The state: every deadline passed, and the 40 other callers (threads started within that
    # second, which a loaded machine may run late) are in the queue.
    while (len(expired) < 200 or core.queued < 40) and time.monotonic() < end:
        time.sleep(0.01)
    assert expired == ["flood"] * 200
    assert core.queued == 40
    release.set()
    for thread in [holder, *threads]:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    assert order.count("quiet") == 20 and order.count("flood") == 20
    quiet_positions = [i for i, tenant in enumerate(order, 1) if tenant == "quiet"]
    assert quiet_positions[-1] <= 31, order  # two quiet starts per flood start, within one
    _assert_empty(core)
    scheduler.close(timeout_s=WAIT_S)
