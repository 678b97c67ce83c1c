"""The scheduler's per-name state (SharedLimits, agentgate/tasks/_limits.py) stays bounded past
PER_NAME_STATE names: idle token buckets are forgotten, never a drained one, and invented tools
share one breaker while a named tool keeps its own. (The scheduler's other rules are in
tests/test_tasks_*.py.)"""

from __future__ import annotations

import pytest

from agentgate.errors import CircuitOpen
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._call import OVERFLOW_BREAKER
from agentgate.tasks._config import BreakerPolicy, RateLimit, ToolLimits
from agentgate.tasks._limits import PER_NAME_STATE
from agentgate.tasks._token_bucket import TokenBucket


async def test_token_buckets_of_idle_tools_are_forgotten_past_the_bound_and_a_drained_one_is_kept() -> None:
    """Every tool of a default rate has its bucket: past ``PER_NAME_STATE`` names the full ones
    (what a new bucket would be) are dropped, never one that still lacks tokens (a caller inventing
    tool names must not refill another tool's bucket)."""
    config = SchedulerConfig(
        result_cache_size=0, default_tool=ToolLimits(rate=RateLimit(per_second=0.001, burst=2))
    )
    scheduler = Scheduler(config)

    async def ok(_attempt: object) -> str:
        return "ok"

    try:
        assert await scheduler.submit(ToolCall(tool="drained"), ok) == "ok"  # one token of two left
        drained = scheduler.shared.buckets["drained"]
        for i in range(PER_NAME_STATE + 10):
            scheduler.shared.buckets[f"idle-{i}"] = TokenBucket(1000.0, 2)  # full
        assert await scheduler.submit(ToolCall(tool="new"), ok) == "ok"
        assert len(scheduler.shared.buckets) == 2
        assert scheduler.shared.buckets["drained"] is drained and drained.level < 2
    finally:
        await scheduler.aclose()


def test_past_the_bound_invented_tools_share_one_breaker_and_a_named_tool_keeps_its_own() -> None:
    """Breakers are never dropped (a running call holds its own): past ``PER_NAME_STATE`` keys,
    tools the config does not name share ``OVERFLOW_BREAKER``, so a failing invented tool opens
    that one, never the breaker of a tool the config names, first seen after the flood."""
    config = SchedulerConfig(
        result_cache_size=0,
        tools={"pay": ToolLimits()},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=3600),
    )
    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        for i in range(PER_NAME_STATE):
            shared.breaker_for(ToolCall(tool=f"made-up-{i}"))
        late = [shared.breaker_for(ToolCall(tool=f"late-{i}")) for i in range(3)]
        assert {b.key for b in late} == {OVERFLOW_BREAKER} and len({id(b) for b in late}) == 1

        def boom(_attempt: object) -> str:
            raise ConnectionError("down")

        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), boom)
        with pytest.raises(CircuitOpen):
            sync.submit(ToolCall(tool="late-1"), lambda _a: "ok")  # shares the open breaker
        assert sync.submit(ToolCall(tool="pay"), lambda _a: "ok") == "ok"  # named: its own
        assert shared.breaker_for(ToolCall(tool="pay")).key == "tool:pay"
        assert sync.submit(ToolCall(tool="made-up-0"), lambda _a: "ok") == "ok"  # seen before: its own
        assert len(shared.breakers) == PER_NAME_STATE + 2
