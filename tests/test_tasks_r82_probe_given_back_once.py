"""Review R82: a half-open probe whose attempt met an error before the tool started (after the
breaker admitted it: its cross-process claim or lease, its deadline's reckoning) was given back
twice: once by the failure's report to the breaker (``_failed``: a class outside ``trip_on``
gives its probe back), once more by the attempt's ``finally``, which still counted it as not
started. With another probe running, the breaker then let one more probe through than
``half_open_max_calls``. It is given back once now, in the async core and the sync facade alike.

The error is injected (``_attempt_deadline`` raising): once a store's limits are checked when the
configuration is built (review R82), no configuration reaches this path by itself."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import agentgate.tasks._scheduler as async_core
import agentgate.tasks._sync as sync_facade
from agentgate.errors import CircuitOpen
from agentgate.tasks import Attempt, BreakerPolicy, Scheduler, SchedulerConfig, SyncScheduler, ToolCall

CONFIG = SchedulerConfig(
    breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.01, half_open_max_calls=2)
)


def _broken(*args: object) -> tuple[float, float]:
    raise RuntimeError("injected before the tool started")


async def test_a_probe_failed_before_its_tool_started_is_given_back_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R82: with two probes allowed, one running and one failed before it started, a third
    and a fourth call were both let through as probes (three at once); the fourth is refused."""
    scheduler = Scheduler(CONFIG)
    release = asyncio.Event()
    running: list[int] = []

    async def down(attempt: Attempt) -> str:
        raise ConnectionRefusedError("down")

    async def held(attempt: Attempt) -> str:
        running.append(attempt.number)
        await release.wait()
        return "ran"

    try:
        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("u", {}), down)  # opens the breaker
        await asyncio.sleep(0.02)  # half open
        first = asyncio.create_task(scheduler.submit(ToolCall("u", {}), held))
        while not running:
            await asyncio.sleep(0)
        with monkeypatch.context() as patch:
            patch.setattr(async_core, "_attempt_deadline", _broken)
            with pytest.raises(RuntimeError, match="injected"):  # only a call with a deadline reckons one
                await scheduler.submit(ToolCall("u", {}, deadline=time.time() + 60), held)
        second = asyncio.create_task(scheduler.submit(ToolCall("u", {}), held))
        while len(running) < 2:
            await asyncio.sleep(0)
        third = asyncio.create_task(scheduler.submit(ToolCall("u", {}), held))
        while not third.done() and len(running) < 3:
            await asyncio.sleep(0)
        assert len(running) == 2, "a third probe ran beside two"
        with pytest.raises(CircuitOpen):
            await third
        release.set()
        assert await asyncio.gather(first, second) == ["ran", "ran"]
    finally:
        release.set()
        await scheduler.aclose()


def test_a_probe_failed_before_its_tool_started_is_given_back_once_in_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R82: the sync facade, as the async core."""
    release = threading.Event()
    started = threading.Semaphore(0)
    results: list[object] = []

    def down(attempt: Attempt) -> str:
        raise ConnectionRefusedError("down")

    def held(attempt: Attempt) -> str:
        started.release()
        release.wait(10)
        return "ran"

    with SyncScheduler(CONFIG) as scheduler:

        def probe() -> None:
            try:
                results.append(scheduler.submit(ToolCall("u", {}), held))
            except CircuitOpen as exc:
                results.append(exc)
                started.release()

        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("u", {}), down)
        time.sleep(0.02)  # half open
        threads = [threading.Thread(target=probe) for _ in range(3)]
        threads[0].start()
        try:
            assert started.acquire(timeout=10)
            with monkeypatch.context() as patch:
                patch.setattr(sync_facade, "_attempt_deadline", _broken)
                with pytest.raises(RuntimeError, match="injected"):
                    scheduler.submit(ToolCall("u", {}, deadline=time.time() + 60), held)
            threads[1].start()
            assert started.acquire(timeout=10)
            threads[2].start()  # refused (appends CircuitOpen) or, a third probe, runs
            assert started.acquire(timeout=10)
            assert results and isinstance(results[0], CircuitOpen), "a third probe ran beside two"
        finally:
            release.set()
            for thread in threads:
                thread.join(10)
    assert results[1:] == ["ran", "ran"]
