"""Review R92: ``aclose`` waits for the store work a scheduler's calls leave running (a dead
letter's write, a lease given back), kept as futures of the loop that asked for it. ``aclose``
awaited on another loop, while that one ran in another thread, waited on them from the wrong
thread and never woke: it hung for good behind a cancelled caller's dead letter. And the release
of an attempt's lease, whose call was cancelled while it waited, was not kept at all: ``aclose``
returned before that lease was given back. Both are now the pool's futures, which ``aclose``
waits for from whichever loop it runs on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.store.leases import Lease
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, ToolCall, ToolLimits

WAIT_S = 10.0  # bound on waits that a bug does not make endless: only a bug comes near it
CLOSE_S = 2.0  # bound on aclose once the write may end: without the fix it waits for good


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


class _HeldDeadLetters(DeadLetterStore):
    """A dead-letter store whose writes wait until ``free`` is set."""

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__(store)
        self.writing = threading.Event()
        self.free = threading.Event()

    def record(self, letter: DeadLetter) -> None:
        self.writing.set()
        self.free.wait(WAIT_S)
        super().record(letter)


def test_aclose_on_another_loop_waits_for_a_live_loops_dead_letter(store: SQLiteStore) -> None:
    dead = _HeldDeadLetters(store)
    scheduler = Scheduler(dead_letters=dead)
    loop_b = asyncio.new_event_loop()
    thread_b = threading.Thread(target=loop_b.run_forever, daemon=True)
    thread_b.start()

    async def tool(attempt: Attempt) -> str:
        raise ValueError("bad input")

    async def cancelled_caller() -> None:
        call = asyncio.create_task(scheduler.submit(ToolCall("t", {}), tool))
        while not dead.writing.is_set():
            await asyncio.sleep(0.001)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    async def close_on_a() -> None:
        closing = asyncio.create_task(scheduler.aclose())
        await asyncio.sleep(0)  # aclose waits for the write now
        dead.free.set()
        async with asyncio.timeout(CLOSE_S):  # TimeoutError: it waited on loop B's future
            await closing

    try:
        asyncio.run_coroutine_threadsafe(cancelled_caller(), loop_b).result(WAIT_S)
        assert scheduler._background  # the write runs on, loop B still alive
        asyncio.run(close_on_a())
        assert [letter.id for letter in dead.recent()] == [letter.id for letter in scheduler.dead_letters()]
    finally:
        dead.free.set()
        loop_b.call_soon_threadsafe(loop_b.stop)
        thread_b.join(WAIT_S)
        loop_b.close()


async def test_aclose_waits_for_the_release_of_a_call_cancelled_while_releasing(store: SQLiteStore) -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}), store=store)
    leases = scheduler._leases
    assert leases is not None
    releasing = threading.Event()
    released = threading.Event()
    free = threading.Event()
    released_at_close: list[bool] = []
    release, close = leases.release, leases.close

    def held_release(lease: Lease, **kwargs: object) -> None:
        releasing.set()
        free.wait(0.3)  # set by the leases' close, which a fixed aclose makes only after this
        release(lease, **kwargs)  # type: ignore[arg-type]
        released.set()

    def recording_close(**kwargs: object) -> None:
        released_at_close.append(released.is_set())
        free.set()
        close(**kwargs)  # type: ignore[arg-type]

    leases.release = held_release  # type: ignore[method-assign]
    leases.close = recording_close  # type: ignore[method-assign]

    async def tool(attempt: Attempt) -> str:
        return "done"

    call = asyncio.create_task(scheduler.submit(ToolCall("t", {}), tool))
    async with asyncio.timeout(WAIT_S):
        while not releasing.is_set():
            await asyncio.sleep(0.001)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    async with asyncio.timeout(WAIT_S):
        await scheduler.aclose()
    assert released_at_close == [True]  # its lease given back before aclose closed the leases
    assert leases.rows("tool:t") == []
