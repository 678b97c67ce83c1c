"""Review R59: fair-queueing weights (of tenants and of priority classes) are bounded at
configuration, so that shares follow the weights up to the bound.

The fair queue counts a member's pass in integers, growing by its stride ``720720 * 2**32 /
weight`` rounded (``_fair.py``): weights above about 3e15 all had the stride 1, and two tenants of
weight 4e15 and 8e15 shared equally. The configuration now refuses a weight above ``MAX_WEIGHT``.
"""

from __future__ import annotations

import asyncio

import pytest

from agentgate.errors import InputError
from agentgate.tasks import Attempt, PriorityClass, Scheduler, SchedulerConfig, TenantShare, ToolCall
from agentgate.tasks._config import MAX_WEIGHT


@pytest.mark.parametrize("weight", [4e15, 8e15, MAX_WEIGHT * 2, 1e300])
def test_a_weight_above_the_bound_is_refused_naming_the_bound(weight: float) -> None:
    """Review R59: tenant (and class) weights above about 3e15 all had stride 1, so tenants of
    weight 4e15 and 8e15 got the same share; such a weight is now an InputError naming the bound."""
    with pytest.raises(InputError, match=r"tenant weight must be <= 1e\+06"):
        TenantShare(weight=weight)
    with pytest.raises(InputError, match=r"priority class 'c': weight must be <= 1e\+06"):
        PriorityClass("c", weight=weight)


def test_the_bound_itself_is_taken() -> None:
    assert TenantShare(weight=MAX_WEIGHT).weight == MAX_WEIGHT
    assert PriorityClass("c", weight=MAX_WEIGHT).weight == MAX_WEIGHT


async def _first_starts(config: SchedulerConfig, calls: list[ToolCall], count: int) -> list[ToolCall]:
    """The first ``count`` of ``calls`` to start, all queued behind a held slot first."""
    scheduler = Scheduler(config)
    release = asyncio.Event()
    started: list[ToolCall] = []

    async def hold(attempt: Attempt) -> None:
        await release.wait()

    async def run(attempt: Attempt) -> None:
        started.append(attempt.call)

    holder = asyncio.ensure_future(scheduler.submit(ToolCall("h"), hold))
    await asyncio.sleep(0)
    waiting = [asyncio.ensure_future(scheduler.submit(call, run)) for call in calls]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(holder, *waiting)
    await scheduler.aclose()
    return started[:count]


async def test_tenant_shares_follow_their_weights_at_the_bound() -> None:
    """Tenants of weight MAX_WEIGHT and a third of it, both waiting, start calls 3 to 1."""
    config = SchedulerConfig(
        max_concurrency=1,
        tenants={"heavy": TenantShare(weight=MAX_WEIGHT), "light": TenantShare(weight=MAX_WEIGHT / 3)},
    )
    calls = [ToolCall("t", tenant=tenant) for _ in range(40) for tenant in ("heavy", "light")]
    head = await _first_starts(config, calls, 40)
    assert [c.tenant for c in head].count("heavy") == 30


async def test_class_shares_follow_their_weights_at_the_bound() -> None:
    """Classes of one rank weighted MAX_WEIGHT and half of it start calls 2 to 1."""
    config = SchedulerConfig(
        max_concurrency=1,
        priority_classes=(PriorityClass("a", 0, MAX_WEIGHT), PriorityClass("b", 0, MAX_WEIGHT / 2)),
        default_priority="a",
    )
    calls = [ToolCall("t", priority=klass) for _ in range(30) for klass in ("a", "b")]
    head = await _first_starts(config, calls, 30)
    assert [c.priority for c in head].count("a") == 20
