"""R92's regression review of the scheduler's background store work (kept as the pool's futures
since R92): a caller cancelled while its dead letter's write, or its lease's release, ran had that
job awaited through ``asyncio.shield`` alone, so when the job then failed nothing read its
outcome and asyncio logged "Future exception was never retrieved" with the store's traceback, on
top of the failure the job counts itself. Each is now followed (``_StoreWork._followed``): counted
once, logged by nobody."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.tasks import Scheduler, SchedulerConfig, ToolCall, ToolLimits


async def _cancel_while(call: asyncio.Task[object], started: threading.Event) -> None:
    while not started.is_set():
        await asyncio.sleep(0.001)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


def _never_retrieved(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()  # asyncio logs an unretrieved exception as the future is collected
    return [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


def _cancel_while_it_runs_then_free_it(
    scheduler: Scheduler,
    tool: Callable[[dict[str, object]], Awaitable[object]],
    started: threading.Event,
    free: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Cancel a caller of ``tool`` once its store work has ``started``, then ``free`` that work and
    close the scheduler: asyncio logs no "never retrieved" exception."""

    async def main() -> None:
        await _cancel_while(asyncio.create_task(scheduler.submit(ToolCall("t", {}), tool)), started)
        free.set()
        await scheduler.aclose()

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
        assert _never_retrieved(caplog) == []


def test_a_cancelled_callers_failed_dead_letter_write_is_counted_not_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    writing, free = threading.Event(), threading.Event()

    class Failing(DeadLetterStore):
        def record(self, letter: DeadLetter) -> None:
            writing.set()
            free.wait(5)
            raise RuntimeError("a store bug")

    scheduler = Scheduler(dead_letters=Failing(store))

    async def tool(args: dict[str, object]) -> object:
        raise ValueError("bad input")

    _cancel_while_it_runs_then_free_it(scheduler, tool, writing, free, caplog)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 1
    store.close()


def test_a_cancelled_callers_failed_lease_release_is_counted_not_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}), store=store)
    leases = scheduler._leases
    assert leases is not None
    release = leases.release
    releasing, free = threading.Event(), threading.Event()

    def failing(lease: object, **kwargs: object) -> None:
        releasing.set()
        free.wait(5)
        release(lease, **kwargs)  # type: ignore[arg-type]
        raise StoreError("the store went away")

    leases.release = failing  # type: ignore[method-assign]

    async def tool(args: dict[str, object]) -> object:
        return "ok"

    _cancel_while_it_runs_then_free_it(scheduler, tool, releasing, free, caplog)
    assert scheduler.metrics.count("lease_not_released", "tool:t") == 1
    store.close()
