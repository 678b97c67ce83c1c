"""The token bucket: burst, then the refill rate, never more."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.tasks import RateLimit, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_s() == pytest.approx(0.5)
    clock.now = 0.49
    assert not bucket.try_take()
    clock.now = 0.5
    assert bucket.try_take() and not bucket.try_take()
    clock.now = 100.0  # a long idle time refills to the burst, not beyond
    assert bucket.level == 3
    assert sum(bucket.try_take() for _ in range(10)) == 3


def test_allowed_calls_never_exceed_burst_plus_rate_times_time() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=5.0, burst=2, clock=clock)
    taken = 0
    for step in range(1, 1001):
        clock.now = step * 0.013
        taken += bucket.try_take()
        assert taken <= 2 + 5.0 * clock.now + 1e-9


def test_rate_limit_values_are_checked() -> None:
    with pytest.raises(InputError, match="per_second"):
        RateLimit(per_second=0, burst=1)
    with pytest.raises(InputError, match="burst"):
        RateLimit(per_second=1, burst=0)


def test_a_clock_that_steps_back_takes_no_tokens_away() -> None:
    """Review R54: a clock stepped back (a wall clock given as ``clock``, set back an hour) was
    counted as negative time: the level fell an hour's worth of tokens below zero and the
    bucket refused every call for an hour. Time that runs back refills nothing and drains nothing."""
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=2, clock=clock)
    assert bucket.try_take()
    clock.now -= 3600.0
    assert bucket.try_take()  # the token that was there is still there
    assert not bucket.try_take()
    clock.now += 0.5
    assert bucket.try_take()  # refilled for the half second that passed since the step
