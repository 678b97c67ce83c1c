"""Review R91c: store work a scheduler's calls leave running (a lease given back, a breaker's
transition published to the other processes) whose event loop closed before it ended still runs
to its end on the store pool (review R91b), but its failure was counted only by a callback on that
loop, which never runs once it is closed: a give-back the store refused was not counted as
``lease_not_released``, nor a publication as ``breaker_not_shared``, though docs/tasks.md says
both are counted (the dead letter's write already counted its own failure). The job now counts
its own failure, once, whatever becomes of its loop.

The store pool here has one worker, held until the loop has closed: the work is queued behind it,
as it was behind busy workers when the store was slow."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.tasks import Scheduler, _store_work

WAIT_S = 10.0  # bound on waits that a bug does not make endless: only a bug comes near it


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteStore]:
    monkeypatch.setattr(_store_work, "_STORE_WORKERS", 1)
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


def _store_down(*args: object, **kwargs: object) -> None:
    raise StoreError("the store is down")


def _pool_idle(scheduler: Scheduler) -> None:
    """Wait until the store pool's one worker has run every job submitted before now."""
    scheduler._store_pool().submit(lambda: None).result(WAIT_S)


def _queued_on_a_loop_that_closes(scheduler: Scheduler, queue: Callable[[], None]) -> None:
    """Run ``queue()`` on a loop with the pool's one worker busy, then close the loop and let the
    worker go: what ``queue`` submitted runs after its loop has closed. The scheduler is closed
    after it, on a loop of its own."""
    free = threading.Event()

    async def queued() -> None:
        scheduler._store_pool().submit(free.wait, WAIT_S)
        queue()

    try:
        asyncio.run(queued())
    finally:
        free.set()
    _pool_idle(scheduler)

    async def close() -> None:
        async with asyncio.timeout(WAIT_S):
            await scheduler.aclose()

    asyncio.run(close())


def _refused_give_back(scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Giving back a lease of ``tool:t`` that the store refuses to give back."""
    leases = scheduler._leases
    assert leases is not None
    lease = leases.try_acquire("tool:t", 1)
    assert lease is not None
    monkeypatch.setattr(leases, "release", _store_down)
    return lambda: scheduler._give_back(leases, lease)


def _refused_publication(scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Publishing that ``tool:t``'s breaker opened, which the store refuses."""
    assert scheduler._shared_breakers is not None
    monkeypatch.setattr(scheduler._shared_breakers, "publish", _store_down)
    return lambda: scheduler._publish_on_loop("tool:t", "open", time.time(), 1)


def _queued_on_a_live_loop(scheduler: Scheduler, queue: Callable[[], None]) -> None:
    """Run ``queue()`` on a loop, then close the scheduler on it: ``aclose`` waits for what
    ``queue`` submitted, its done callback run."""

    async def queued_then_closed() -> None:
        queue()
        await scheduler.aclose()

    asyncio.run(queued_then_closed())


_Queue = Callable[[Scheduler, pytest.MonkeyPatch], Callable[[], None]]


@pytest.mark.parametrize(
    ("refused", "counted"),
    [(_refused_give_back, "lease_not_released"), (_refused_publication, "breaker_not_shared")],
    ids=["lease_give_back", "breaker_publication"],
)
@pytest.mark.parametrize(
    "queued", [_queued_on_a_loop_that_closes, _queued_on_a_live_loop], ids=["loop_closed", "live_loop"]
)
def test_store_work_failing_is_counted_once_whatever_became_of_its_loop(
    store: SQLiteStore,
    monkeypatch: pytest.MonkeyPatch,
    refused: _Queue,
    counted: str,
    queued: Callable[[Scheduler, Callable[[], None]], None],
) -> None:
    scheduler = Scheduler(store=store)
    queued(scheduler, refused(scheduler, monkeypatch))
    assert scheduler.metrics.count(counted, "tool:t") == 1
