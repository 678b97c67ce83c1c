"""Review R93: a closed scheduler neither publishes nor counts the breaker transitions of the
schedulers still open on the same limits.

``aclose`` left the scheduler attached to its ``SharedLimits``. When it came first among the
schedulers attached, it published another scheduler's breaker transition: on a store pool made
anew that nothing shut down, as a job that no ``aclose`` waited for (the other scheduler's
``aclose`` returned before its transition was written), its failure counted in the closed
scheduler's metrics. Now ``aclose`` detaches the scheduler, and a closed one makes no pool.
"""

from __future__ import annotations

import asyncio

import pytest

from agentgate.store import SQLiteStore, Store
from agentgate.store.leases import SharedBreakers
from agentgate.tasks import Attempt, BreakerPolicy, Scheduler, SchedulerConfig, ToolCall
from agentgate.tasks._limits import SharedLimits

KEY = "tool:t"


async def _ok(attempt: Attempt) -> int:
    return 1


async def _fail(attempt: Attempt) -> None:
    raise ConnectionError("down")


def _first_and_second(limits: SharedLimits, store: Store) -> tuple[Scheduler, Scheduler]:
    """Two schedulers of ``limits``, the first being the one its transitions are told to first."""
    one, two = Scheduler(store=store, limits=limits), Scheduler(store=store, limits=limits)
    first = next(iter(limits._listeners))
    return (one, two) if first is one else (two, one)


def _recording(scheduler: Scheduler, name: str, written: list[str]) -> None:
    shared = scheduler._shared_breakers
    assert shared is not None
    publish = shared.publish

    def recorded(key: str, state: str, opened_at: float) -> None:
        publish(key, state, opened_at)
        written.append(name)

    shared.publish = recorded  # type: ignore[method-assign]


def test_a_closed_scheduler_leaves_the_open_one_to_publish_and_wait(sqlite_store: SQLiteStore) -> None:
    """B's breaker opening is written by B, before B's ``aclose`` returns; closed A makes no pool."""
    limits = SharedLimits(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=60.0)))
    closed, open_ = _first_and_second(limits, sqlite_store)
    written: list[str] = []
    _recording(closed, "closed", written)
    _recording(open_, "open", written)

    async def main() -> None:
        await closed.submit(ToolCall("ok", {}), _ok)  # it knows its loop: it could publish
        await closed.aclose()
        with pytest.raises(ConnectionError):
            await open_.submit(ToolCall("t", {}), _fail)
        await open_.aclose()

    asyncio.run(main())
    assert written == ["open"]
    assert closed._pool is None  # no pool made after its aclose, none left running
    row = SharedBreakers(sqlite_store).read(KEY)
    assert row is not None and row.state == "open"


def test_aclose_twice_with_a_store_returns(sqlite_store: SQLiteStore) -> None:
    """A second ``aclose`` finds the leases given back and the pool shut down: it returns."""

    async def main() -> None:
        scheduler = Scheduler(store=sqlite_store)
        assert await scheduler.submit(ToolCall("ok", {}), _ok) == 1
        await scheduler.aclose()
        await scheduler.aclose()
        assert scheduler._pool is None

    asyncio.run(main())
