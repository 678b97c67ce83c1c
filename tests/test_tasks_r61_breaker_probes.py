"""Review R61: half-open probes under 50 concurrent callers, and cancelled probes.

Real schedulers, real threads and a real event loop; the breaker's reset timeout is waited out.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentgate.errors import CircuitOpen
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
)

CALLERS = 50
PROBES = 3
RESET_S = 0.02
WAIT_S = 10.0  # bound on every wait: only a bug comes near it


def _config(probes: int = PROBES) -> SchedulerConfig:
    return SchedulerConfig(
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S, half_open_max_calls=probes)
    )


def _wait_half_open(state: object) -> None:
    end = time.monotonic() + WAIT_S
    while state() is not BreakerState.HALF_OPEN and time.monotonic() < end:  # type: ignore[operator]
        time.sleep(RESET_S / 4)


def test_half_open_lets_exactly_the_configured_probes_through_50_threads() -> None:
    """Review R61: with 50 threads calling a half-open breaker's tool at once, exactly
    ``half_open_max_calls`` of them run it; every other one is refused with ``CircuitOpen``
    without running, and the probes' success closes the breaker."""
    scheduler = SyncScheduler(_config())

    def fail(attempt: Attempt) -> None:
        raise TimeoutError

    with pytest.raises(TimeoutError):
        scheduler.submit(ToolCall("x"), fail)
    _wait_half_open(lambda: scheduler.scheduler.breaker("tool:x").state)
    ran: list[int] = []
    outcomes: list[str] = []
    lock = threading.Lock()
    answered = threading.Condition(lock)
    start = threading.Barrier(CALLERS)

    def probe(attempt: Attempt) -> str:
        # Hold the probe until every other caller has been answered (a success closes the
        # breaker, and the callers after it would run as in any closed breaker).
        with answered:
            ran.append(attempt.number)
            answered.wait_for(lambda: outcomes.count("refused") >= CALLERS - PROBES, WAIT_S)
        return "ok"

    def caller() -> None:
        start.wait(WAIT_S)
        try:
            outcome = scheduler.submit(ToolCall("x"), probe)
        except CircuitOpen:
            outcome = "refused"
        with answered:
            outcomes.append(outcome)
            answered.notify_all()

    threads = [threading.Thread(target=caller) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert len(ran) == PROBES
    assert outcomes.count("ok") == PROBES
    assert outcomes.count("refused") == CALLERS - PROBES
    assert scheduler.scheduler.breaker("tool:x").state is BreakerState.CLOSED
    scheduler.close()


async def test_half_open_lets_exactly_the_configured_probes_through_50_tasks() -> None:
    """Review R61: with 50 asyncio tasks calling a half-open breaker's tool at once, exactly
    ``half_open_max_calls`` run it; the other 47 get ``CircuitOpen`` without running it."""
    scheduler = Scheduler(_config())

    async def fail(attempt: Attempt) -> None:
        raise TimeoutError

    with pytest.raises(TimeoutError):
        await scheduler.submit(ToolCall("x"), fail)
    while scheduler.breaker("tool:x").state is not BreakerState.HALF_OPEN:
        await asyncio.sleep(RESET_S / 4)
    released = asyncio.Event()
    ran: list[int] = []

    async def probe(attempt: Attempt) -> str:
        ran.append(attempt.number)
        await released.wait()
        return "ok"

    tasks = [asyncio.create_task(scheduler.submit(ToolCall("x"), probe)) for _ in range(CALLERS)]
    while sum(task.done() for task in tasks) < CALLERS - PROBES:
        await asyncio.sleep(0.001)
    released.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert len(ran) == PROBES
    assert sum(outcome == "ok" for outcome in outcomes) == PROBES
    assert sum(isinstance(outcome, CircuitOpen) for outcome in outcomes) == CALLERS - PROBES
    assert scheduler.breaker("tool:x").state is BreakerState.CLOSED
    await scheduler.aclose()


@pytest.mark.parametrize("preemptible", [True, False])
async def test_every_cancelled_probe_is_given_back(preemptible: bool) -> None:
    """Review R61: all ``half_open_max_calls`` probes cancelled by their callers (asyncio cancel,
    a tool that stops at once and one that runs to its end) leave the breaker half open with
    every probe free: the next call probes the tool and closes it, instead of ``CircuitOpen``
    (retry after 0) for good."""
    scheduler = Scheduler(_config(probes=2))

    async def fail(attempt: Attempt) -> None:
        raise TimeoutError

    started = asyncio.Event()
    ended = asyncio.Event()

    async def hang(attempt: Attempt) -> None:
        started.set()
        try:
            await asyncio.sleep(WAIT_S)
        finally:
            ended.set()

    async def short_work(attempt: Attempt) -> None:
        started.set()
        await asyncio.sleep(0.01)

    async def ok(attempt: Attempt) -> str:
        return "ok"

    with pytest.raises(TimeoutError):
        await scheduler.submit(ToolCall("x"), fail)
    while scheduler.breaker("tool:x").state is not BreakerState.HALF_OPEN:
        await asyncio.sleep(RESET_S / 4)
    probes = []
    for _ in range(2):
        started.clear()
        work = hang if preemptible else short_work
        probes.append(asyncio.create_task(scheduler.submit(ToolCall("x"), work, preemptible=preemptible)))
        await asyncio.wait_for(started.wait(), WAIT_S)
    with pytest.raises(CircuitOpen):  # both probes taken
        await scheduler.submit(ToolCall("x"), ok)
    for task in probes:
        task.cancel()
    for task in probes:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert scheduler.breaker("tool:x").state is BreakerState.HALF_OPEN
    assert scheduler.in_flight == 0
    assert await scheduler.submit(ToolCall("x"), ok) == "ok"
    assert scheduler.breaker("tool:x").state is BreakerState.CLOSED
    await scheduler.aclose()
