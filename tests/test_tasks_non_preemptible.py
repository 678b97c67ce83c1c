"""The task scheduler: ``Scheduler.submit(..., preemptible=False)`` must keep the
other rules for work that no cancellation stops. Real threads and event loops, no mocks."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentgate.errors import CircuitOpen, SchedulingError
from agentgate.store import Store
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

WAIT_S = 5.0


def _worker(started: threading.Event, release: threading.Event, log: list[str], name: str):  # type: ignore[no-untyped-def]
    """A sync tool in a worker thread: no cancellation stops it."""

    def work() -> str:
        started.set()
        release.wait(WAIT_S)
        log.append(name)
        return name

    async def attempt(_attempt: Attempt) -> str:
        return await asyncio.to_thread(work)

    return attempt


async def test_a_cancelled_non_preemptible_attempt_keeps_its_slot_until_its_work_ends() -> None:
    """The first call's caller is cancelled while its sync work runs on in its thread. Its slot
    was given back at once, so a second call of a tool limited to one ran beside it (two refunds
    at once under ``concurrency: 1``). The slot is now held until the work has ended, as under
    ``SyncScheduler`` (docs/tasks.md, 'Sync tools cannot be interrupted')."""
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}))
    log: list[str] = []
    first_started, first_release = threading.Event(), threading.Event()
    second_started, second_release = threading.Event(), threading.Event()
    first = asyncio.create_task(
        scheduler.submit(
            ToolCall("t"), _worker(first_started, first_release, log, "first"), preemptible=False
        )
    )
    await asyncio.to_thread(first_started.wait, WAIT_S)
    first.cancel()
    second = asyncio.create_task(
        scheduler.submit(
            ToolCall("t"), _worker(second_started, second_release, log, "second"), preemptible=False
        )
    )
    # While the first call's work still runs, the second must not start.
    assert not await asyncio.to_thread(second_started.wait, 0.3), "two attempts ran under concurrency 1"
    first_release.set()
    second_release.set()
    assert await second == "second"
    assert first.cancelled()
    assert log == ["first", "second"]
    await scheduler.aclose()


async def test_a_cancelled_non_preemptible_probe_lets_no_second_probe_run_beside_it() -> None:
    """Half-open lets one probe through. A probe whose caller was cancelled while its sync work
    ran gave its probe back at once, so a second probe ran beside the first."""
    config = SchedulerConfig(
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05, half_open_max_calls=1)
    )
    scheduler = Scheduler(config)

    async def refused(_attempt: Attempt) -> str:
        raise ConnectionRefusedError

    with pytest.raises(ConnectionRefusedError):  # transient: trips the breaker
        await scheduler.submit(ToolCall("t"), refused)
    assert scheduler.breaker("tool:t").state is BreakerState.OPEN
    await asyncio.sleep(0.06)
    log: list[str] = []
    started, release = threading.Event(), threading.Event()
    probe = asyncio.create_task(
        scheduler.submit(ToolCall("t"), _worker(started, release, log, "probe"), preemptible=False)
    )
    await asyncio.to_thread(started.wait, WAIT_S)
    probe.cancel()
    await asyncio.sleep(0.05)
    assert scheduler.breaker("tool:t").admit() is None, "a second probe admitted while the first still runs"
    release.set()
    await asyncio.gather(probe, return_exceptions=True)
    assert log == ["probe"]
    assert scheduler.breaker("tool:t").admit() is True  # the cancelled probe's is given back at its end
    scheduler.breaker("tool:t").release()
    await scheduler.aclose()


def test_a_sync_tool_running_when_a_store_backed_sync_scheduler_closes_returns_its_result(
    store: Store,
) -> None:
    """``SyncScheduler.close`` promises that a sync tool already running finishes in its caller's
    thread and its result is returned. Without a store it was; with one (every attempt handed to
    the loop thread and back) the caller got ``SchedulingError`` although the tool ran to its end,
    inviting a second call of a tool whose effect had happened."""
    scheduler = SyncScheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}), store=store)
    started = threading.Event()
    answers: list[object] = []

    def work(_attempt: Attempt) -> str:
        started.set()
        threading.Event().wait(0.4)
        return "done"

    def caller() -> None:
        try:
            answers.append(scheduler.submit(ToolCall("t"), work))
        except SchedulingError as exc:
            answers.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(WAIT_S)
    scheduler.close(timeout_s=0.05)
    thread.join(WAIT_S)
    assert answers == ["done"]


async def test_a_stale_failure_in_half_open_lets_no_second_probe_run_beside_the_first() -> None:
    """A call admitted while the breaker was closed failed after a probe had been let through in
    half-open: it opened the breaker again and reset the probe count while the probe still ran,
    so after the reset timeout a second probe ran beside the first (``half_open_max_calls=1``).
    Such a stale failure now leaves the decision to the probe in flight."""
    config = SchedulerConfig(
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05, half_open_max_calls=1)
    )
    scheduler = Scheduler(config)
    stale_fails, probe_ends = asyncio.Event(), asyncio.Event()
    running: list[str] = []

    async def stale(_attempt: Attempt) -> str:
        running.append("stale")
        await stale_fails.wait()
        raise ConnectionRefusedError

    async def refused(_attempt: Attempt) -> str:
        raise ConnectionRefusedError

    async def probe(_attempt: Attempt) -> str:
        running.append("probe")
        await probe_ends.wait()
        return "ok"

    first = asyncio.create_task(scheduler.submit(ToolCall("t"), stale))
    await asyncio.sleep(0.01)
    with pytest.raises(ConnectionRefusedError):  # opens the breaker
        await scheduler.submit(ToolCall("t"), refused)
    await asyncio.sleep(0.06)
    second = asyncio.create_task(scheduler.submit(ToolCall("t"), probe))  # the half-open probe
    await asyncio.sleep(0.01)
    stale_fails.set()
    with pytest.raises(ConnectionRefusedError):
        await first
    await asyncio.sleep(0.06)

    async def another(_attempt: Attempt) -> str:
        running.append("another probe")
        return "ok"

    with pytest.raises(CircuitOpen):  # the probe still runs: no second one
        await scheduler.submit(ToolCall("t"), another)
    assert running == ["stale", "probe"]
    probe_ends.set()
    assert await second == "ok"
    assert scheduler.breaker("tool:t").state is BreakerState.CLOSED
    await scheduler.aclose()
