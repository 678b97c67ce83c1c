"""Regression review of R93: a call that closes its own scheduler (``aclose(drain=False)`` from its
tool, as aclose's docstring allows) runs on, and still does its own store work: its dead letter is
written, its lease given back, and its caller gets the tool's outcome.

Since 4e9bd713 ``aclose`` marked the store pool shut down and ``_store_pool`` then raised
``SchedulingError`` into that call: the tool's error (or its result) was replaced by it, and the
dead letter was not written. The pool is now kept for that call's work, and shut down when it ends.
"""

from __future__ import annotations

import concurrent.futures

import pytest

from agentgate.errors import SchedulingError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, ToolCall, ToolLimits


def _pools_made(scheduler: Scheduler) -> list[concurrent.futures.ThreadPoolExecutor]:
    """Every pool ``scheduler._store_pool`` hands out, recorded."""
    pools: list[concurrent.futures.ThreadPoolExecutor] = []
    store_pool = scheduler._store_pool

    def recorded() -> concurrent.futures.ThreadPoolExecutor:
        pool = store_pool()
        if pool not in pools:
            pools.append(pool)
        return pool

    scheduler._store_pool = recorded  # type: ignore[method-assign]
    return pools


def _assert_shut_down(scheduler: Scheduler, pools: list[concurrent.futures.ThreadPoolExecutor]) -> None:
    """No pool of ``scheduler`` left running, and none made any more."""
    assert pools and scheduler._pool is None
    for pool in pools:
        with pytest.raises(RuntimeError):
            pool.submit(print)
    with pytest.raises(SchedulingError):
        scheduler._store_pool()


async def test_a_self_closing_call_that_fails_gets_its_error_and_its_dead_letter_written(
    sqlite_store: SQLiteStore,
) -> None:
    scheduler = Scheduler(store=sqlite_store)
    pools = _pools_made(scheduler)

    async def tool(attempt: Attempt) -> None:
        await scheduler.aclose(drain=False)
        raise ConnectionError("down after close")

    with pytest.raises(ConnectionError, match="down after close"):
        await scheduler.submit(ToolCall("t", {}), tool)
    assert [letter.id for letter in DeadLetterStore(sqlite_store).recent()] == [
        letter.id for letter in scheduler.dead_letters()
    ]
    assert len(scheduler.dead_letters()) == 1
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 0
    _assert_shut_down(scheduler, pools)


async def test_a_self_closing_call_holding_a_lease_gives_it_back_and_returns_its_result(
    sqlite_store: SQLiteStore,
) -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}), store=sqlite_store)
    pools = _pools_made(scheduler)

    async def tool(attempt: Attempt) -> str:
        await scheduler.aclose(drain=False)
        return "done"

    assert await scheduler.submit(ToolCall("t", {}), tool) == "done"
    assert scheduler.metrics.count("lease_not_released", "tool:t") == 0
    _assert_shut_down(scheduler, pools)
    await scheduler.aclose()  # a second aclose, from outside, returns
