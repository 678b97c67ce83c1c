"""Review R81: a call admitted (its slot and its rate token taken) and then refused before its
attempt by a breaker whose half-open probe is taken kept its rate token spent, though no attempt
ran (docs/tasks.md: one token per attempt; a call that never starts gives its token back): with a
rate of one token in ten seconds, the next call after the breaker closed waited for a token that
the refused call had never used. Real schedulers, a real event loop and real threads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentgate.errors import CircuitOpen
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

RESET_S = 0.05
WAIT_S = 10.0  # bound on every wait: only a bug comes near it
CONFIG = SchedulerConfig(
    tools={"t": ToolLimits(rate=RateLimit(per_second=0.1, burst=3))},
    breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S),
)


def _refused(attempt: Attempt) -> str:
    raise ConnectionRefusedError("down")


async def test_a_call_refused_by_a_taken_probe_gives_its_rate_token_back() -> None:
    scheduler = Scheduler(CONFIG)
    try:
        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("t"), _refused)  # one token spent; the breaker opens
        await asyncio.sleep(RESET_S * 2)  # half open
        release = asyncio.Event()

        async def probe(attempt: Attempt) -> str:
            await release.wait()
            return "probed"

        probing = asyncio.create_task(scheduler.submit(ToolCall("t"), probe))
        end = time.monotonic() + WAIT_S
        while scheduler.shared.in_flight == 0 and time.monotonic() < end:  # the probe runs
            await asyncio.sleep(0.001)
        assert scheduler.shared.in_flight == 1
        try:
            before = scheduler.shared.buckets["t"].level
            with pytest.raises(CircuitOpen):
                await scheduler.submit(ToolCall("t"), lambda attempt: "never")
            assert scheduler.shared.buckets["t"].level >= before  # given back (and refilled a little)
        finally:
            release.set()
        assert await asyncio.wait_for(probing, WAIT_S) == "probed"
        # The token the refused call took is there: the next call starts at once.
        assert await scheduler.submit(ToolCall("t", deadline=time.time() + 1), lambda attempt: "ran") == "ran"
    finally:
        await scheduler.aclose()


def test_a_sync_call_refused_by_a_taken_probe_gives_its_rate_token_back() -> None:
    with SyncScheduler(CONFIG) as scheduler:
        shared = scheduler.scheduler.shared
        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("t"), _refused)
        time.sleep(RESET_S * 2)
        release, probing = threading.Event(), threading.Event()

        def probe(attempt: Attempt) -> str:
            probing.set()
            release.wait(WAIT_S)
            return "probed"

        prober = threading.Thread(target=scheduler.submit, args=(ToolCall("t"), probe))
        prober.start()
        try:
            assert probing.wait(WAIT_S)
            before = shared.buckets["t"].level
            with pytest.raises(CircuitOpen):
                scheduler.submit(ToolCall("t"), lambda attempt: "never")
            assert shared.buckets["t"].level >= before
        finally:
            release.set()
            prober.join(WAIT_S)
        assert scheduler.submit(ToolCall("t", deadline=time.time() + 1), lambda attempt: "ran") == "ran"
