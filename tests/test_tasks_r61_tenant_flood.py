"""Review R61: tenant fairness against a flood, counted in positions (starts), not times.

The rule (docs/tasks.md, "Order"): while two tenants both have calls waiting, the numbers they
start stay within one of the ratio of their weights; a tenant that comes back enters level with
the tenant served last, and may start one more call first. So a quiet tenant's call waits for at
most one or two of a flooding tenant's starts, whatever the size of the flood. Real schedulers,
one slot, the order of starts recorded.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

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
QUIET = 20
WAIT_S = 10.0  # bound on every wait: only a bug comes near it


def _config(quiet_weight: float = 1.0) -> SchedulerConfig:
    return SchedulerConfig(
        tools={"t": ToolLimits(concurrency=1)},
        tenants={"flood": TenantShare(), "quiet": TenantShare(weight=quiet_weight)},
    )


async def _queue_flood_then_quiet(scheduler: Scheduler, order: list[str]) -> None:
    """One slot held; 1,000 flooding calls queued, then ``QUIET`` quiet ones; the slot freed."""
    release = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await release.wait()

    async def record(attempt: Attempt) -> None:
        order.append(attempt.call.tenant)

    holder = asyncio.create_task(scheduler.submit(ToolCall("t", tenant="flood"), hold))
    while scheduler.in_flight < 1:
        await asyncio.sleep(0)
    tasks = [
        asyncio.create_task(scheduler.submit(ToolCall("t", tenant="flood"), record)) for _ in range(FLOOD)
    ]
    while scheduler.queued < FLOOD:
        await asyncio.sleep(0)
    tasks += [
        asyncio.create_task(scheduler.submit(ToolCall("t", tenant="quiet"), record)) for _ in range(QUIET)
    ]
    while scheduler.queued < FLOOD + QUIET:
        await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, *tasks), WAIT_S)


@pytest.mark.parametrize("quiet_weight", [1.0, 3.0])
async def test_a_flood_of_1000_calls_delays_the_quiet_tenant_by_its_share_only(quiet_weight: float) -> None:
    """Review R61: with 1,000 calls of one tenant queued before 20 of another, the quiet
    tenant's i-th call starts at the latest at position about ``i * (1 + 1/weight)`` (+ 1),
    not after the flood: the starts while both wait keep to the weights within one call."""
    scheduler = Scheduler(_config(quiet_weight))
    order: list[str] = []
    await _queue_flood_then_quiet(scheduler, order)
    quiet_positions = [position for position, tenant in enumerate(order, 1) if tenant == "quiet"]
    assert len(quiet_positions) == QUIET
    for i, position in enumerate(quiet_positions, 1):
        floods_before = position - i
        assert floods_before <= i / quiet_weight + 1, (i, position)
    # While both wait, the starts stay within one of the weights' ratio.
    last = quiet_positions[-1]
    for prefix in range(1, last + 1):
        quiet = order[:prefix].count("quiet")
        flood = prefix - quiet
        assert abs(quiet - flood * quiet_weight) <= quiet_weight + 1, (prefix, quiet, flood)
    await scheduler.aclose()


async def test_a_quiet_tenant_calling_one_at_a_time_waits_at_most_two_flood_starts() -> None:
    """Review R61: a tenant that sends one call at a time (each after the last ended) while
    another keeps 1,000 queued waits for at most two of the flood's starts per call: it comes
    back level with the tenant served last, never behind the flood."""
    scheduler = Scheduler(_config())
    order: list[str] = []
    release = asyncio.Event()

    async def record(attempt: Attempt) -> None:
        order.append(attempt.call.tenant)
        await release.wait()  # each flood call holds the slot until the quiet caller is queued

    flood = [
        asyncio.create_task(scheduler.submit(ToolCall("t", tenant="flood"), record)) for _ in range(FLOOD)
    ]
    while scheduler.queued < FLOOD - 1:
        await asyncio.sleep(0)

    async def quiet_record(attempt: Attempt) -> None:
        order.append("quiet")

    waits = []
    for _ in range(QUIET):
        release.clear()
        starts_before = len(order)
        call = asyncio.create_task(scheduler.submit(ToolCall("t", tenant="quiet"), quiet_record))
        while "quiet" not in order[starts_before:]:
            await asyncio.sleep(0)
            release.set()  # the running flood call ends; later ones too, until the quiet one ran
            await asyncio.sleep(0)
            release.clear()
        await call
        waits.append(order[starts_before:].index("quiet"))
    assert max(waits) <= 2, waits
    release.set()
    await asyncio.wait_for(asyncio.gather(*flood), WAIT_S)
    await scheduler.aclose()


def test_sync_callers_a_flood_of_1000_calls_delays_the_quiet_tenant_by_its_share_only() -> None:
    """Review R61: the same rule for ``SyncScheduler`` callers, whose flood is queued by an
    async scheduler sharing the limits (1,000 threads would only test the machine): the quiet
    tenant's sync calls, queued after the flood, start in alternation with it."""
    config = _config()
    scheduler = SyncScheduler(config)
    core = Scheduler(limits=scheduler.scheduler.shared)
    order: list[str] = []
    lock = threading.Lock()

    def sync_record(attempt: Attempt) -> None:
        with lock:
            order.append(attempt.call.tenant)

    async def flood_then_quiet() -> None:
        release = asyncio.Event()

        async def hold(attempt: Attempt) -> None:
            await release.wait()

        async def record(attempt: Attempt) -> None:
            with lock:
                order.append(attempt.call.tenant)

        holder = asyncio.create_task(core.submit(ToolCall("t", tenant="flood"), hold))
        while core.in_flight < 1:
            await asyncio.sleep(0)
        tasks = [
            asyncio.create_task(core.submit(ToolCall("t", tenant="flood"), record)) for _ in range(FLOOD)
        ]
        while core.queued < FLOOD:
            await asyncio.sleep(0)
        quiet = [
            asyncio.create_task(
                asyncio.to_thread(scheduler.submit, ToolCall("t", tenant="quiet"), sync_record)
            )
            for _ in range(4)
        ]
        while core.queued < FLOOD + 4:
            await asyncio.sleep(0.001)
        release.set()
        await asyncio.wait_for(asyncio.gather(holder, *tasks, *quiet), WAIT_S)
        await core.aclose()

    asyncio.run(flood_then_quiet())
    quiet_positions = [position for position, tenant in enumerate(order, 1) if tenant == "quiet"]
    assert len(quiet_positions) == 4
    for i, position in enumerate(quiet_positions, 1):
        assert position - i <= i + 1, (i, position, order[:12])
    scheduler.close()
