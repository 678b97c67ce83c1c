"""Review R91: a call given up writes its dead letter on the scheduler's store pool. A caller
cancelled while that write waited for a worker (a slow store: another process's write
transaction, a busy PostgreSQL) dropped it before it began: the letter was kept in memory and
counted as ``gave_up``, but never stored, and not counted as ``dead_letter_not_stored`` either.
The same happened to the calls ``aclose`` cancelled (``drain=False``, or a drain's ``timeout_s``),
and to a ``SyncScheduler`` with a store, whose calls run on the async core. The write now runs to
its end, and ``aclose`` (``close``) waits for it.

The store pool here has one worker, held by the failing tool until the caller is gone: the letter's
write is queued behind it every time, as it was behind busy workers when the store was slow."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.errors import SchedulingError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall, _store_work

WAIT_S = 10.0  # bound on every wait: only a bug comes near it


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteStore]:
    monkeypatch.setattr(_store_work, "_STORE_WORKERS", 1)
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


class _HoldsThePool:
    """A tool that takes the store pool's one worker until ``free``, then fails (not retried)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self.free = threading.Event()

    def __call__(self, attempt: Attempt) -> str:
        self._scheduler._store_pool().submit(self.free.wait, WAIT_S)
        raise ValueError("bad input")

    async def run(self, attempt: Attempt) -> str:
        return self(attempt)


def _stored_and_kept(scheduler: Scheduler, store: SQLiteStore) -> tuple[list[str], list[str]]:
    stored = [letter.id for letter in DeadLetterStore(store).recent()]
    return stored, [letter.id for letter in scheduler.dead_letters()]


async def _letter_queued(scheduler: Scheduler) -> None:
    """Until the call's dead letter is recorded: its write is submitted in the same step."""
    async with asyncio.timeout(WAIT_S):
        while not scheduler.dead_letters():
            await asyncio.sleep(0.001)


async def test_a_cancelled_callers_dead_letter_is_stored(store: SQLiteStore) -> None:
    scheduler = Scheduler(dead_letters=DeadLetterStore(store))
    tool = _HoldsThePool(scheduler)
    try:
        call = asyncio.create_task(scheduler.submit(ToolCall("t", {}), tool.run))
        await _letter_queued(scheduler)
        call.cancel()  # its caller goes away: a client disconnect, an outer timeout
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        tool.free.set()
    await scheduler.aclose()
    stored, kept = _stored_and_kept(scheduler, store)
    assert len(kept) == 1
    assert stored == kept
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 0


@pytest.mark.parametrize(("drain", "timeout_s"), [(False, None), (True, 0.0)])
async def test_the_dead_letters_of_calls_aclose_cancels_are_stored_before_it_returns(
    store: SQLiteStore, drain: bool, timeout_s: float | None
) -> None:
    scheduler = Scheduler(dead_letters=DeadLetterStore(store))
    tool = _HoldsThePool(scheduler)
    try:
        call = asyncio.create_task(scheduler.submit(ToolCall("t", {}), tool.run))
        await _letter_queued(scheduler)
        closing = asyncio.create_task(scheduler.aclose(drain=drain, timeout_s=timeout_s))
        await asyncio.wait([call], timeout=WAIT_S)
        assert call.cancelled()  # aclose cancelled it while its letter's write was queued
    finally:
        tool.free.set()
    async with asyncio.timeout(WAIT_S):
        await closing
    stored, kept = _stored_and_kept(scheduler, store)
    assert len(kept) == 1
    assert stored == kept


def test_the_dead_letter_of_a_call_a_sync_close_cancels_is_stored(store: SQLiteStore) -> None:
    sync = SyncScheduler(store=store)  # with a store: the call runs on the async core
    tool = _HoldsThePool(sync.scheduler)
    told: list[BaseException] = []

    def caller() -> None:
        try:
            sync.submit(ToolCall("t", {}), tool)
        except Exception as exc:
            told.append(exc)

    calling = threading.Thread(target=caller)
    closing = threading.Thread(target=sync.close, kwargs={"drain": False})
    try:
        calling.start()
        end = time.monotonic() + WAIT_S
        while not sync.dead_letters() and time.monotonic() < end:
            time.sleep(0.001)
        assert sync.dead_letters()
        closing.start()
        calling.join(WAIT_S)  # the close cancels the call while its letter's write is queued
        assert not calling.is_alive()
    finally:
        tool.free.set()
    closing.join(WAIT_S)
    assert not closing.is_alive()
    assert len(told) == 1 and isinstance(told[0], SchedulingError)
    stored, kept = _stored_and_kept(sync.scheduler, store)
    assert len(kept) == 1
    assert stored == kept
