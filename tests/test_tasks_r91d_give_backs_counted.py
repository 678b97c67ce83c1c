"""Review R91d: docs/tasks.md says every ``lease_not_released`` failure is counted, once, by the
store work that failed, whatever the error. Two give-backs were not counted: the one a store
worker makes of a lease it took after its call was cancelled (``_Taking.take`` suppressed the
store's error), and those of the leases still held when the scheduler closes
(``LeaseManager.close`` skipped them). Both now count each lease the store refuses, once."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.leases import Lease, LeaseManager
from agentgate.tasks import Scheduler

WAIT_S = 10.0  # bound on waits that a bug does not make endless: only a bug comes near it


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


def _store_down(*args: object, **kwargs: object) -> None:
    raise StoreError("the store is down")


def _holding(scheduler: Scheduler, *keys: str) -> LeaseManager:
    """The scheduler's lease manager, holding one lease of each of ``keys``."""
    leases = scheduler._leases
    assert leases is not None
    for key in keys:
        assert leases.try_acquire(key, 1) is not None
    return leases


def test_a_lease_taken_after_its_call_was_cancelled_and_refused_back_is_counted(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = Scheduler(store=store)
    leases = scheduler._leases
    assert leases is not None
    taking_started, go = threading.Event(), threading.Event()
    acquire = leases.try_acquire

    def slow_acquire(key: str, limit: int, **kwargs: object) -> Lease | None:
        taking_started.set()
        go.wait(WAIT_S)
        return acquire(key, limit)

    monkeypatch.setattr(leases, "try_acquire", slow_acquire)
    monkeypatch.setattr(leases, "release", _store_down)

    async def cancelled_while_taking() -> None:
        call = asyncio.ensure_future(scheduler._lease("tool:t", 1, asyncio.get_running_loop(), None))
        assert await asyncio.to_thread(taking_started.wait, WAIT_S)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        go.set()  # the worker takes the lease now, for a call given up: it gives it back itself
        # Nothing the test holds ends with that worker's job (aclose does not wait for it, and a
        # job submitted after it may run on another worker first): its count is what it leaves.
        # Closed before it took the lease, the scheduler would not have given that lease back.
        deadline = time.monotonic() + WAIT_S
        while scheduler.metrics.count("lease_not_released", "tool:t") == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await scheduler.aclose()

    asyncio.run(cancelled_while_taking())
    assert scheduler.metrics.count("lease_not_released", "tool:t") == 1
    assert leases.held() == 0  # not renewed either: it expires within the lease's ttl


def test_leases_aclose_cannot_give_back_are_each_counted_once(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = Scheduler(store=store)
    _holding(scheduler, "tool:a", "tool:b")
    monkeypatch.setattr(store, "transaction", _store_down)
    asyncio.run(scheduler.aclose())
    scheduler.release_leases()  # closed already: nothing is tried, nor counted, again
    assert scheduler.metrics.count("lease_not_released", "tool:a") == 1
    assert scheduler.metrics.count("lease_not_released", "tool:b") == 1


def test_a_lease_release_leases_cannot_give_back_is_counted(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = Scheduler(store=store)
    _holding(scheduler, "tool:t")
    monkeypatch.setattr(store, "transaction", _store_down)
    scheduler.release_leases()
    assert scheduler.metrics.count("lease_not_released", "tool:t") == 1


def test_a_lease_a_dropped_scheduler_cannot_give_back_is_counted_in_its_registry(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = CollectorRegistry()
    scheduler = Scheduler(store=store, registry=registry)
    _holding(scheduler, "tool:t")
    monkeypatch.setattr(store, "transaction", _store_down)
    del scheduler
    gc.collect()
    labels = {"event": "lease_not_released", "tool": "tool:t"}
    assert registry.get_sample_value("agentgate_tasks_events_total", labels) == 1


def test_close_tries_every_lease_and_raises_an_error_that_is_not_the_stores(store: SQLiteStore) -> None:
    leases = LeaseManager(store)
    for key in ("tool:a", "tool:b"):
        assert leases.try_acquire(key, 1) is not None

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    real = store.transaction
    store.transaction = broken  # type: ignore[method-assign]
    unreleased: list[str] = []
    try:
        with pytest.raises(RuntimeError, match="a bug"):
            leases.close(unreleased=lambda lease: unreleased.append(lease.key))
    finally:
        store.transaction = real  # type: ignore[method-assign]
    assert sorted(unreleased) == ["tool:a", "tool:b"]
