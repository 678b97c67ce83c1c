"""Review R82: a tool's ``concurrency`` and a breaker's ``half_open_max_calls`` become a store's
lease limit (``LeaseManager.try_acquire``, at most ``MAX_STORED_INTEGER``, 2**63 - 1). One above
it passed the configuration's checks, and with a store every call then failed with a bare
``InputError`` ("the lease limit must be a whole number ..."), recorded as a failed attempt (a
dead letter, the breaker told) though the tool never ran. Both are refused when the
configuration is built, naming the field; the policy refuses such a ``concurrency`` with its
file and line, as it bounds its other integers. The largest one allowed runs on a store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentgate.errors import InputError, PolicyError
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store._base import MAX_STORED_INTEGER
from agentgate.tasks import Attempt, BreakerPolicy, Scheduler, SchedulerConfig, ToolCall, ToolLimits


async def _ran(attempt: Attempt) -> str:
    return "ran"


def test_a_concurrency_above_what_a_store_holds_is_refused_when_the_config_is_built() -> None:
    """Review R82: ``ToolLimits(concurrency=2**63)`` was taken."""
    with pytest.raises(InputError, match=rf"concurrency must be <= {MAX_STORED_INTEGER}, got {2**63}"):
        ToolLimits(concurrency=2**63)
    assert ToolLimits(concurrency=MAX_STORED_INTEGER).concurrency == MAX_STORED_INTEGER


def test_half_open_max_calls_above_what_a_store_holds_is_refused_when_the_config_is_built() -> None:
    """Review R82: ``BreakerPolicy(half_open_max_calls=2**63)`` was taken."""
    with pytest.raises(InputError, match=rf"breaker\.half_open_max_calls must be <= {MAX_STORED_INTEGER}"):
        BreakerPolicy(half_open_max_calls=2**63)
    assert BreakerPolicy(half_open_max_calls=MAX_STORED_INTEGER).half_open_max_calls == MAX_STORED_INTEGER


def test_the_policy_refuses_a_tools_concurrency_above_what_a_store_holds_with_its_line() -> None:
    """Review R82: the policy loaded ``concurrency: 2**63``, which the scheduler could not use."""
    text = f"version: 1\ntools:\n  t:\n    concurrency: {2**63}\n"
    with pytest.raises(PolicyError, match=r"tools\.t\.concurrency") as caught:
        parse_policy(text, source="p.yaml")
    assert "p.yaml:4" in str(caught.value), caught.value
    policy = parse_policy(
        f"version: 1\ntools:\n  t:\n    concurrency: {MAX_STORED_INTEGER}\n", source="p.yaml"
    )
    assert policy.document.tools["t"].concurrency == MAX_STORED_INTEGER


def test_the_largest_counts_allowed_run_on_a_store(tmp_path: Path) -> None:
    """Review R82: a concurrency and a probe limit of 2**63 - 1 are lease limits a store takes: the
    tool runs, and a half-open breaker's probe runs and closes it."""
    config = SchedulerConfig(
        tools={"t": ToolLimits(concurrency=MAX_STORED_INTEGER)},
        breaker=BreakerPolicy(
            failure_threshold=1, reset_timeout_s=0.01, half_open_max_calls=MAX_STORED_INTEGER
        ),
    )

    async def main() -> None:
        async def down(attempt: Attempt) -> str:
            raise ConnectionRefusedError("down")

        scheduler = Scheduler(config, store=SQLiteStore(tmp_path / "s.db"))
        try:
            assert await scheduler.submit(ToolCall("t", {}), _ran) == "ran"
            with pytest.raises(ConnectionRefusedError):
                await scheduler.submit(ToolCall("u", {}), down)
            await asyncio.sleep(0.02)  # past reset_timeout_s: half open
            assert await scheduler.submit(ToolCall("u", {}), _ran) == "ran"  # the probe
            assert [b.state.value for b in scheduler.breakers() if b.key.endswith("u")] == ["closed"]
            # Only the failure that opened the breaker: no attempt failed on a lease limit.
            assert [d.errors[0].error_type for d in scheduler.dead_letters()] == ["ConnectionRefusedError"]
        finally:
            await scheduler.aclose()

    asyncio.run(main())
