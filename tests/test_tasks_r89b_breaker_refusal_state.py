"""Review R89b: a call refused by a breaker was told the state the breaker was in when its
message was made, read after the refusal, not the state that refused it. Where the reset timeout
passed in between, a call refused while the breaker was open was told it "is half open and its
1 probe(s) are running", with the probe free. The state is now read under the breaker's lock with
the decision (``CircuitBreaker.refusal``, ``admission``), and the refusal says "is open"."""

from __future__ import annotations

import asyncio

import pytest

from agentgate.errors import CircuitOpen
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
)

RESET_S = 10.0
POLICY = BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S, half_open_max_calls=1)
OPEN = r"^the circuit breaker tool:t is open \(retry after 0\.000s\)$"


class _Clock:
    """A clock that reads just short of the reset timeout once, when armed, and past it after."""

    def __init__(self) -> None:
        self.now = 0.0
        self.armed = False

    def __call__(self) -> float:
        if self.armed:
            self.armed = False
            return RESET_S - 1e-4
        return self.now

    def arm(self) -> None:
        self.now, self.armed = RESET_S, True


def _opened(breaker: CircuitBreaker) -> _Clock:
    clock = _Clock()
    breaker._clock = clock  # the scheduler's breaker, on a clock the test moves
    breaker.record_failure("transient")
    assert breaker.state is BreakerState.OPEN
    clock.arm()  # the refusal reads "open"; every later read finds the reset timeout passed
    return clock


def _ran(attempt: Attempt) -> str:
    return "ran"


async def _ran_async(attempt: Attempt) -> str:
    return "ran"


def test_a_call_refused_while_open_is_told_open_though_the_timeout_passes_at_once() -> None:
    with SyncScheduler(SchedulerConfig(breaker=POLICY)) as scheduler:
        breaker = scheduler.scheduler.breaker("tool:t")
        _opened(breaker)
        with pytest.raises(CircuitOpen, match=OPEN):
            scheduler.submit(ToolCall("t", {}), _ran)
        assert breaker.admit_in_period() == 1, "the probe is free: the next call may go"


def test_the_async_core_tells_it_the_same() -> None:
    async def main() -> None:
        scheduler = Scheduler(SchedulerConfig(breaker=POLICY))
        try:
            _opened(scheduler.breaker("tool:t"))
            with pytest.raises(CircuitOpen, match=OPEN):
                await scheduler.submit(ToolCall("t", {}), _ran_async)
        finally:
            await scheduler.aclose()

    asyncio.run(main())


def test_admission_refused_says_the_state_that_refused_it() -> None:
    breaker = CircuitBreaker("tool:t", POLICY)
    _opened(breaker)
    refused = breaker.admission()
    assert not isinstance(refused, int)
    assert (refused.state, refused.retry_after_s) == (BreakerState.OPEN, 0.0)
    assert breaker.admission() == 1  # half open now: the probe
    held = breaker.admission()
    assert not isinstance(held, int) and held.state is BreakerState.HALF_OPEN
