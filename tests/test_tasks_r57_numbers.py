"""Numbers no float holds, given where the scheduler takes seconds, rates and weights: a clear
``InputError`` naming the field where the value is given, never an ``OverflowError`` or a
``ValueError`` later (review R57)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.errors import InputError
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    PriorityClass,
    RateLimit,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    TenantShare,
    TokenBucket,
    ToolCall,
    ToolLimits,
)

#: Past the largest float (about 1.8e308): ``float()`` of it raises OverflowError.
HUGE = 10**400
#: Past the 4,300 digits Python writes: ``repr`` of it raises ValueError.
UNWRITABLE = 10**5000


async def _ok(attempt: Attempt) -> str:
    return "ran"


@pytest.mark.parametrize("field", ["deadline", "grant_expires_at"])
@pytest.mark.parametrize("value", [HUGE, UNWRITABLE, -HUGE], ids=["huge", "unwritable", "-huge"])
async def test_a_call_deadline_no_float_holds_is_refused_when_the_call_is_made(
    field: str, value: int
) -> None:
    """Review R57: ToolCall(deadline=10**400) was accepted, and submitting it raised OverflowError
    (async and sync alike) from the deadline's arithmetic, not a typed error."""
    with pytest.raises(
        InputError, match=f"{field} must be an aware datetime or Unix seconds, got an integer of"
    ):
        ToolCall("t", **{field: value})  # type: ignore[arg-type]
    # A large deadline a float does hold still runs.
    scheduler = Scheduler()
    try:
        assert await scheduler.submit(ToolCall("t", **{field: 10**300}), _ok) == "ran"  # type: ignore[arg-type]
    finally:
        await scheduler.aclose()


MAKERS: dict[str, tuple[Callable[[int], object], str]] = {
    "timeout_s": (lambda v: ToolLimits(timeout_s=v), "timeout_s must be a finite number"),
    "per_second": (lambda v: RateLimit(v), "rate.per_second must be a finite number"),
    "burst": (lambda v: RateLimit(1.0, burst=v), "rate.burst must be <= "),
    "concurrency": (lambda v: ToolLimits(concurrency=-v), "concurrency must be >= 1"),
    "tenant weight": (lambda v: TenantShare(weight=v), "tenant weight must be a finite number"),
    "class weight": (lambda v: PriorityClass("x", weight=v), "'x': weight must be a finite number"),
    "multiplier": (lambda v: RetryPolicy(multiplier=v), "retry.multiplier must be a finite number"),
    "backoff": (lambda v: RetryPolicy(backoff_max_s=v), "retry.backoff_max_s must be a finite number"),
    "reset_timeout_s": (
        lambda v: BreakerPolicy(reset_timeout_s=v),
        "breaker.reset_timeout_s must be a finite number",
    ),
    "lease_ttl_s": (lambda v: SchedulerConfig(lease_ttl_s=v), "lease_ttl_s must be a finite number"),
    "max_queued": (lambda v: SchedulerConfig(max_queued=-v), "max_queued must be >= 0"),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
@pytest.mark.parametrize("value", [HUGE, UNWRITABLE], ids=["huge", "unwritable"])
def test_a_configuration_number_no_float_holds_is_an_input_error_naming_the_field(
    name: str, value: int
) -> None:
    """Review R57: ToolLimits(timeout_s=10**400) (a rate, a weight, a backoff) raised OverflowError
    from math.isfinite, and RateLimit(burst=10**5000) or a concurrency of -10**5000 raised
    ValueError while writing the error message."""
    make, message = MAKERS[name]
    with pytest.raises(InputError, match=message) as raised:
        make(value)
    if value is UNWRITABLE:
        assert f"an integer of {value.bit_length()} bits" in str(raised.value)


def test_a_count_with_more_digits_than_python_writes_is_still_a_count() -> None:
    """Review R57: ToolLimits(concurrency=10**5000), a valid bound, raised ValueError: the error
    message of the check it passed was written first. (A tool's concurrency is at most a store's
    lease limit since review R82: refused, its message written.)"""
    assert SchedulerConfig(max_queued=UNWRITABLE).max_queued == UNWRITABLE
    assert TenantShare(concurrency=UNWRITABLE).concurrency == UNWRITABLE
    with pytest.raises(InputError, match=f"concurrency must be <= {2**63 - 1}, got an integer of"):
        ToolLimits(concurrency=UNWRITABLE)


@pytest.mark.parametrize(
    ("rate", "burst"),
    [(HUGE, 1), (1.0, UNWRITABLE), (1.0, 2**53 + 1)],
    ids=["rate", "burst", "inexact-burst"],
)
def test_a_token_bucket_no_float_can_count_is_refused(rate: float, burst: int) -> None:
    """Review R57: TokenBucket(10**400, 1) was made, and its first try_take raised OverflowError."""
    with pytest.raises(InputError, match="a token bucket needs a finite rate > 0 and an integer burst"):
        TokenBucket(rate, burst)


async def test_a_drain_timeout_no_float_holds_waits_without_bound() -> None:
    """Review R57: aclose(timeout_s=10**400) and close(timeout_s=10**400) raised OverflowError
    instead of draining (a wait that long is no bound)."""
    scheduler = Scheduler()
    assert await scheduler.submit(ToolCall("t"), _ok) == "ran"
    await scheduler.aclose(timeout_s=HUGE)
    sync = SyncScheduler()
    assert sync.submit(ToolCall("t"), lambda attempt: "ran") == "ran"
    sync.close(timeout_s=UNWRITABLE)
    await Scheduler().aclose(timeout_s=-UNWRITABLE)  # a negative one: no wait at all, as for -1
