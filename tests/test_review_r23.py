"""Review R23: a process that runs for weeks. What grows with the number of operations where a
bound (or cleanup at close) is expected: memory, threads, file descriptors, rows. Real
components: real event loops, a real SQLite file, the `store` fixture (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SharedLimits, ToolCall


def _growth_per_op(op: Callable[[int], None], warmup: int, n: int) -> float:
    """Bytes still allocated after ``n`` calls of ``op`` (after ``warmup`` calls), per call."""
    for i in range(warmup):
        op(i)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            op(warmup + i)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / n


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
    assert started == 50 + n
