"""Review R89: a call refused because every half-open probe was taken was told the breaker "is
open (retry after 0.000s)", which reads as open and free to retry at once. It is now told the
breaker is half open with its probes running (as the store's probe-claim refusal says), in the
async core and the sync facade alike; a refusal while open still says when a probe may go."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentgate.errors import CircuitOpen
from agentgate.tasks import Attempt, BreakerPolicy, Scheduler, SchedulerConfig, SyncScheduler, ToolCall

RESET_S = 0.2  # long enough for the call refused while open to come before it ends
CONFIG = SchedulerConfig(
    breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S, half_open_max_calls=1)
)
OPEN = r"^the circuit breaker tool:t is open \(retry after 0\.\d{3}s\)$"
HALF_OPEN = r"^the circuit breaker tool:t is half open and its 1 probe\(s\) are running"


def _down(attempt: Attempt) -> str:
    raise ConnectionRefusedError("down")


async def _down_async(attempt: Attempt) -> str:
    raise ConnectionRefusedError("down")


def test_a_call_beyond_the_half_open_probes_is_told_the_breaker_is_half_open_in_threads() -> None:
    release, probing = threading.Event(), threading.Event()

    def probe(attempt: Attempt) -> str:
        probing.set()
        release.wait(10)
        return "ran"

    with SyncScheduler(CONFIG) as scheduler:
        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("t", {}), _down)
        with pytest.raises(CircuitOpen, match=OPEN):
            scheduler.submit(ToolCall("t", {}), _down)
        time.sleep(RESET_S * 1.25)
        thread = threading.Thread(target=scheduler.submit, args=(ToolCall("t", {}), probe))
        thread.start()
        try:
            assert probing.wait(10)
            with pytest.raises(CircuitOpen, match=HALF_OPEN) as refused:
                scheduler.submit(ToolCall("t", {}), _down)
            assert refused.value.retry_after_s == 0.0
        finally:
            release.set()
            thread.join(10)


async def test_a_call_beyond_the_half_open_probes_is_told_the_breaker_is_half_open() -> None:
    scheduler = Scheduler(CONFIG)
    release, probing = asyncio.Event(), asyncio.Event()

    async def probe(attempt: Attempt) -> str:
        probing.set()
        await release.wait()
        return "ran"

    try:
        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("t", {}), _down_async)
        with pytest.raises(CircuitOpen, match=OPEN):
            await scheduler.submit(ToolCall("t", {}), _down_async)
        await asyncio.sleep(RESET_S * 1.25)
        running = asyncio.create_task(scheduler.submit(ToolCall("t", {}), probe))
        await probing.wait()
        with pytest.raises(CircuitOpen, match=HALF_OPEN):
            await scheduler.submit(ToolCall("t", {}), _down_async)
        release.set()
        assert await running == "ran"
    finally:
        release.set()
        await scheduler.aclose()
