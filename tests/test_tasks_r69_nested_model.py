"""Review R69: a seeded walk over ``SharedLimits`` checks the nested-call bookkeeping after every step.

Review R69 stopped visiting every queued nested call at each finish and each call queued: a finish
looks only at those under a lender it gives a slot back to and those counting against a slot it
freed (``_unblocking``/``_unblocked``), through indexes kept beside ``nested_waiting``. This walk
drives real limits (global, tool, tenant, agent, a rate-limited tool) with calls started, queued
(some nested, under any running call, lenders finishing first included), finished, cancelled,
abandoned, dropped for a closed loop, hastened and slowed, and after each step checks: no queued
nested call could start now by borrowing (else a finish missed it: a starvation), one blocked only
by its rate has the timer armed, and the indexes hold exactly what ``nested_waiting`` implies (no
entry left behind). Seeded: the same steps every run; nothing timed.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from agentgate.tasks import Scheduler, SchedulerConfig, SharedLimits, TenantShare, ToolCall, ToolLimits
from agentgate.tasks._config import RateLimit
from agentgate.tasks._waiter import Waiter

CONFIGS = {
    "all-limits": SchedulerConfig(
        max_concurrency=4,
        tools={
            "a": ToolLimits(concurrency=2),
            "b": ToolLimits(concurrency=1),
            "c": ToolLimits(concurrency=1),
            "r": ToolLimits(concurrency=2, rate=RateLimit(0.001, 3)),
        },
        tenants={"t": TenantShare(concurrency=2), "u": TenantShare(concurrency=2)},
        principal_concurrency=2,
    ),
    "per-tool": SchedulerConfig(tools={"a": ToolLimits(concurrency=2), "b": ToolLimits(concurrency=1)}),
    "global": SchedulerConfig(max_concurrency=2, tools={"a": ToolLimits(concurrency=1)}),
}


def _indexes(limits: SharedLimits) -> tuple[dict[object, set[Waiter]], ...]:
    under: dict[object, set[Waiter]] = {}
    tools: dict[object, set[Waiter]] = {}
    slots: dict[object, set[Waiter]] = {}
    for waiter in limits.nested_waiting:
        ancestor = waiter.parent
        while ancestor is not None:
            if ancestor.owner is limits:
                under.setdefault(ancestor, set()).add(waiter)
                tools.setdefault(ancestor.call.tool, set()).add(waiter)
            ancestor = ancestor.parent
        for slot in limits._nested_slots(waiter.call):
            slots.setdefault(slot, set()).add(waiter)
    return under, tools, slots


def _check(limits: SharedLimits, where: str) -> None:
    for waiter in limits.nested_waiting:
        if waiter.future.done():
            continue  # cancelled, its abandon not run yet: skipped at its turn
        assert waiter.alive and not waiter.granted, f"{where}: a stale entry"
        assert waiter.parent is not None
        plan = limits._borrow_plan(waiter.call, waiter.limits, waiter.parent)
        rate = waiter.limits.rate
        if plan and rate is not None and limits._bucket(waiter.call.tool, waiter.limits).wait_s() > 0:
            assert limits._timer_at != float("inf"), f"{where}: rate-blocked, no timer armed"
            continue
        assert not plan, f"{where}: a queued nested call could start under {sorted(plan)}"
    indexed = tuple(
        {key: set(entries) for key, entries in index.items()}
        for index in (limits.nested_under, limits.nested_under_tool, limits.nested_by)
    )
    assert indexed == _indexes(limits), f"{where}: the nested indexes differ from nested_waiting"


class _ClosedLoop:
    def is_closed(self) -> bool:
        return True


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_no_nested_call_is_left_startable_or_indexed_after_any_step(name: str) -> None:
    """Review R69: 40 seeded walks of 300 steps per configuration; see the module's docstring."""
    config = CONFIGS[name]
    loop = asyncio.new_event_loop()
    for seed in range(40):
        rng = random.Random(seed)
        limits = SharedLimits(config)
        metrics = Scheduler(limits=limits).metrics
        tools = sorted(config.tools)
        running: list[Waiter] = []
        queued: list[Waiter] = []
        cancelled: list[Waiter] = []
        for step in range(300):
            roll = rng.random()
            call = ToolCall(rng.choice(tools), tenant=rng.choice("tu"), principal=rng.choice("pq"))
            limits_of = limits.tool_limits(call.tool)
            with limits.lock:
                if roll < 0.45:
                    parent = rng.choice(running) if running and rng.random() < 0.8 else None
                    waiter = limits.start_now(call, limits_of, parent)
                    if waiter is not None:
                        running.append(waiter)
                    else:
                        priority = config.priority_class(call.priority)
                        future = loop.create_future()
                        waiter = limits.enqueue(
                            call, limits_of, priority, False, future, metrics, loop, parent
                        )
                        if not waiter.granted and rng.random() < 0.1:
                            waiter.loop = _ClosedLoop()  # type: ignore[assignment]  # its loop closed
                        queued.append(waiter)
                elif roll < 0.85 and running:
                    limits.finish(running.pop(rng.randrange(len(running))))
                elif roll < 0.9 and queued:
                    waiter = rng.choice(queued)
                    if not waiter.granted and not waiter.future.done():
                        waiter.future.cancel()  # what Task.cancel does; its abandon comes later
                        cancelled.append(waiter)
                elif roll < 0.93 and cancelled:
                    waiter = cancelled.pop(0)
                    if waiter in queued:
                        queued.remove(waiter)
                    limits.abandon(waiter)
                elif roll < 0.96 and (queued or running):
                    waiter = rng.choice(queued + running)
                    if rng.random() < 0.5:
                        limits.hasten(waiter, config.priority_classes[0])
                    else:
                        limits.slow(waiter, config.priority_class(waiter.call.priority))
                elif queued:
                    waiter = queued.pop(rng.randrange(len(queued)))
                    if waiter.granted:
                        running.append(waiter)
                    elif waiter not in cancelled:
                        limits.abandon(waiter)
                for waiter in [w for w in queued if w.granted]:
                    queued.remove(waiter)
                    if not waiter.future.cancelled():
                        running.append(waiter)
                _check(limits, f"seed {seed} step {step}")
        limits.close()
    loop.close()
