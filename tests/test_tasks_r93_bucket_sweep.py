"""Review R93: past ``PER_NAME_STATE`` rate-limited tool names, a new name costs amortized O(1).

The full buckets are dropped when the buckets reach a threshold that then doubles with the
buckets kept (as the fair queue's ``_sweep``). Until R93, with no bucket full, every new name
scanned every bucket again (quadratic in the names invented).
"""

from __future__ import annotations

import pytest

from agentgate.tasks import SchedulerConfig, ToolCall, ToolLimits, _limits
from agentgate.tasks._config import RateLimit
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._token_bucket import TokenBucket

BOUND = 64


def _use_new_tools(shared: SharedLimits, count: int) -> None:
    for i in range(count):
        call = ToolCall(f"invented-{i}", tenant="t", principal="p")
        with shared.lock:
            waiter = shared.start_now(call, shared.tool_limits(call.tool))
            assert waiter is not None
            shared.finish(waiter)


def test_buckets_short_of_tokens_are_swept_a_linear_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_limits, "PER_NAME_STATE", BOUND)
    examined = 0
    level = TokenBucket.level

    def counted(bucket: TokenBucket) -> float:
        nonlocal examined
        examined += 1
        return level.fget(bucket)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(TokenBucket, "level", property(counted))
    # A token every 100 s: no bucket used by a new name is full again during the test.
    shared = SharedLimits(SchedulerConfig(default_tool=ToolLimits(rate=RateLimit(per_second=0.01, burst=1))))
    try:
        names = 20 * BOUND
        _use_new_tools(shared, names)
        assert len(shared.buckets) == names  # none full: none dropped
        # Sweeps at 64, 128, 256, 512, 1024 buckets: under 2 examinations per name in all
        # (a sweep per name past the bound examined about 20 * 64 * 20 * 64 / 2).
        assert examined < 2 * names
        assert shared.buckets_sweep_at == 2 * 1024
    finally:
        shared.close()


def test_full_buckets_are_still_dropped_and_the_threshold_comes_back_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_limits, "PER_NAME_STATE", BOUND)
    shared = SharedLimits(SchedulerConfig(default_tool=ToolLimits(rate=RateLimit(per_second=0.01, burst=1))))
    try:
        _use_new_tools(shared, 4 * BOUND)
        assert shared.buckets_sweep_at == 4 * BOUND
        for bucket in shared.buckets.values():
            bucket.give_back()  # full again: what a new bucket would be
        with shared.lock:
            shared._bucket("another", shared.tool_limits("another"))
        assert list(shared.buckets) == ["another"]
        assert shared.buckets_sweep_at == BOUND
    finally:
        shared.close()
