"""A process that runs for weeks. What grows with the number of operations where a
bound (or cleanup at close) is expected: memory, threads, file descriptors, rows. Real
components: real event loops, a real SQLite file, the `store` fixture (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry

from agentgate.store import Store
from agentgate.tasks import (
    Attempt,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)


def _growth_per_op(op: Callable[[int], None], warmup: int, n: int) -> float:
    """Bytes still allocated per call of ``op`` over ``n`` calls (after ``warmup`` calls): the
    smaller of two windows of ``n`` calls each (``2 * n`` calls in all). A leak grows in both;
    CPython itself now and then keeps a block of a few hundred KB in one window (a bare
    ``asyncio.run`` loop does, once in a few hundred runs), which alone read as 2,400 bytes per
    call in one window of 800 (review R57: a CI run failed on it at a tree, and at older trees
    alike, that leaked nothing)."""
    for i in range(warmup):
        op(i)
    windows = []
    tracemalloc.start()
    try:
        for window in range(2):
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(n):
                op(warmup + window * n + i)
            gc.collect()
            windows.append((tracemalloc.get_traced_memory()[0] - before) / n)
    finally:
        tracemalloc.stop()
    return min(windows)


async def _ok(_attempt: Attempt) -> str:
    return "ok"


def test_a_scheduler_per_event_loop_that_is_never_scraped_keeps_no_counts_of_the_gone_ones() -> None:
    """A Gate makes one scheduler per event loop (``asyncio.run`` per request in a sync web app).
    Each one's counts were kept, after it was collected, until the next Prometheus scrape: a
    process that is never scraped (no metrics endpoint) grew by about 700 bytes per request,
    forever. They are now folded into the retired totals when the next scheduler is made."""
    registry = CollectorRegistry()
    limits = SharedLimits(SchedulerConfig())

    def request(i: int) -> None:
        async def main() -> None:
            scheduler = Scheduler(registry=registry, limits=limits)
            assert await scheduler.submit(ToolCall("lookup"), _ok) == "ok"
            await scheduler.aclose()

        asyncio.run(main())

    n = 800
    growth = _growth_per_op(request, warmup=50, n=n)
    assert growth < 100, f"{growth:.0f} bytes kept per scheduler made and dropped"
    # Nothing was lost: the scrape still counts every start of every scheduler gone.
    gc.collect()
    started = registry.get_sample_value(
        "agentgate_tasks_events_total", {"event": "started", "tool": "lookup"}
    )
    assert started == 50 + 2 * n


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _scheduler_threads() -> int:
    return sum(t.name == "agentgate-scheduler" and t.is_alive() for t in threading.enumerate())


def _settled(count: Callable[[], int], want: int) -> int:
    """``count()`` once it is at most ``want`` (a thread that was told to stop may take a moment)."""
    deadline = time.monotonic() + 5.0
    while (seen := count()) > want and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return seen


@pytest.mark.parametrize("with_store", [False, True], ids=["direct", "store"])
def test_a_sync_scheduler_dropped_without_close_stops_its_loop_thread(
    with_store: bool, sqlite_store: Store
) -> None:
    """A SyncScheduler's loop thread held the loop, not the scheduler: one dropped without
    ``close`` (a long-running service that makes one per job and forgets to close it) left its
    thread and its loop's three file descriptors behind, for the life of the process. Its loop
    now stops, and closes, when the scheduler is collected."""
    with SyncScheduler(store=sqlite_store if with_store else None) as warm:  # the store's WAL files
        warm.submit(ToolCall("lookup"), lambda _attempt: "ok")
    before_threads, before_fds = _scheduler_threads(), _descriptors()
    for _ in range(30):
        scheduler = SyncScheduler(store=sqlite_store if with_store else None)
        assert scheduler.submit(ToolCall("lookup"), lambda _attempt: "ok") == "ok"
        del scheduler
    assert _settled(_scheduler_threads, before_threads) == before_threads
    assert _settled(_descriptors, before_fds) <= before_fds
    # close() still closes: once, with nothing left behind, and the finalizer is not run again.
    scheduler = SyncScheduler()
    scheduler.close()
    scheduler.close()
    del scheduler
    assert _settled(_scheduler_threads, before_threads) == before_threads


def _rate_timers() -> int:
    return sum(t.name == "agentgate-rate-timer" and t.is_alive() for t in threading.enumerate())


def _burst(scheduler: SyncScheduler, value: int) -> list[int]:
    """Six calls from four threads: those beyond the burst of one wait for the rate timer."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda _: scheduler.submit(ToolCall("t"), lambda _a: value), range(6)))


def test_limits_dropped_without_close_end_their_rate_timer_thread() -> None:
    """The rate timer thread held its limits strongly, so a scheduler dropped without ``close``
    that had a rate-limited call wait for a token left a timer thread (and its limits, queue and
    breakers) behind for the life of the process. The thread now holds the limits weakly and
    ends when they are collected; a closed one still stops at once."""
    config = SchedulerConfig(tools={"t": ToolLimits(rate=RateLimit(per_second=1000.0, burst=1))})
    before = _rate_timers()
    for _ in range(10):
        scheduler = SyncScheduler(config)
        assert _burst(scheduler, 1) == [1] * 6
        assert _rate_timers() > before  # the timer ran
        del scheduler
    assert _settled(_rate_timers, before) == before
    # Limits kept alive still dispatch from their timer, and close() stops it.
    with SyncScheduler(config) as kept:
        assert _burst(kept, 2) == [2] * 6
    assert _settled(_rate_timers, before) == before
