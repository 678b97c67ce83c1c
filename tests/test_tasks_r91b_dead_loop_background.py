"""Review R91b: ``aclose`` waits for the store work a scheduler's calls leave running (a dead
letter's write, a lease given back). When that work's event loop closed before it ended (its
caller cancelled, then ``asyncio.run`` returned with the work queued behind busy store workers),
its future was never settled: the job still ran, but no loop was left to say so. ``aclose`` on a
later loop then waited for it for good. It now forgets such work, as it forgets a call of a closed
loop.

The store pool here has one worker, held until the first loop has closed: the work is queued
behind it every time, as it was behind busy workers when the store was slow."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, ToolCall, _store_work

WAIT_S = 10.0  # bound on waits that a bug does not make endless: only a bug comes near it
CLOSE_S = 1.0  # bound on the later aclose: without the fix it waits for good


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteStore]:
    monkeypatch.setattr(_store_work, "_STORE_WORKERS", 1)
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


def _until(done: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < end
        time.sleep(0.005)


def _aclose_on_a_later_loop(scheduler: Scheduler) -> None:
    async def close() -> None:
        async with asyncio.timeout(CLOSE_S):
            await scheduler.aclose()

    asyncio.run(close())  # TimeoutError: it waited for work no loop will ever settle


def test_a_dead_letter_written_after_its_loop_closed_does_not_hold_aclose(store: SQLiteStore) -> None:
    scheduler = Scheduler(dead_letters=DeadLetterStore(store))
    free = threading.Event()

    async def tool(attempt: Attempt) -> str:
        scheduler._store_pool().submit(free.wait, WAIT_S)  # the pool's one worker busy
        raise ValueError("bad input")

    async def cancelled_caller() -> None:
        call = asyncio.create_task(scheduler.submit(ToolCall("t", {}), tool))
        async with asyncio.timeout(WAIT_S):
            while not scheduler.dead_letters():  # its write is submitted in the same step
                await asyncio.sleep(0.001)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    try:
        asyncio.run(cancelled_caller())  # the loop closes with the letter's write queued
    finally:
        free.set()
    _until(lambda: len(DeadLetterStore(store).recent()) == 1)  # the write ran to its end
    _aclose_on_a_later_loop(scheduler)
    assert [letter.id for letter in DeadLetterStore(store).recent()] == [
        letter.id for letter in scheduler.dead_letters()
    ]


def test_a_lease_given_back_after_its_loop_closed_does_not_hold_aclose(store: SQLiteStore) -> None:
    scheduler = Scheduler(store=store)
    assert scheduler._leases is not None
    leases = scheduler._leases
    lease = leases.try_acquire("tool:t", 1)
    assert lease is not None
    free = threading.Event()

    async def cancelled_call_gives_back() -> None:
        scheduler._store_pool().submit(free.wait, WAIT_S)  # the pool's one worker busy
        scheduler._give_back(leases, lease)  # as a call cancelled in the queue with a lease

    try:
        asyncio.run(cancelled_call_gives_back())  # the loop closes with the give-back queued
    finally:
        free.set()
    _until(lambda: leases.rows("tool:t") == [])  # given back by the store pool all the same
    _aclose_on_a_later_loop(scheduler)
    assert leases.held() == 0
