"""Review R95: calls that arrive while a read of the shared breaker row is in flight wait for it.

``_sync_breaker`` marked the key as read *before* it awaited the store's row, so every call of
the key that arrived during that read skipped it and was admitted on the process's local breaker,
as old as the previous read (any age): with the store saying open, a burst ran against the failing
backend (only the call that read was refused); with the store saying closed after another
process's probe, a burst was refused by the stale half-open breaker. Now one read of a key is in
flight at a time and every call that arrives meanwhile awaits it before admission; a caller
cancelled during its read leaves the read to the calls waiting for it, and an error of the read
is the error of each of them.

A real store (SQLite, PostgreSQL), the other process's transition written to it by a
``SharedBreakers`` of its own; the store's read is held on a ``threading.Event`` until every call
has reached the check, no sleep as synchronisation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from agentgate.errors import CircuitOpen
from agentgate.store import Store
from agentgate.store.leases import SharedBreakers, SharedBreakerState
from agentgate.tasks import Attempt, BreakerPolicy, BreakerState, Scheduler, SchedulerConfig, ToolCall

KEY = "tool:t"
BESIDE = 4  # calls made while the first one's read is held


class _HeldReads:
    """The scheduler's reads of the breaker row, each held until ``release`` (then failing with
    ``error`` when one is given), and the calls that reached the breaker check (``reached``)."""

    def __init__(self, scheduler: Scheduler, error: Exception | None = None) -> None:
        assert scheduler._shared_breakers is not None
        self._read = scheduler._shared_breakers.read
        self._error = error
        self.started = threading.Event()
        self._released = threading.Event()
        self.reads = 0
        self.checks = 0
        self.all_reached = asyncio.Event()
        scheduler._shared_breakers.read = self.read  # type: ignore[method-assign]
        check = scheduler._sync_breaker

        async def counted(*args: object) -> None:
            self.checks += 1
            if self.checks == 1 + BESIDE:
                self.all_reached.set()
            await check(*args)  # type: ignore[arg-type]

        scheduler._sync_breaker = counted  # type: ignore[method-assign]

    def read(self, key: str) -> SharedBreakerState | None:
        self.reads += 1
        self.started.set()
        assert self._released.wait(10.0), "the test never released the read"
        if self._error is not None:
            raise self._error
        return self._read(key)

    def release(self) -> None:
        self._released.set()


async def _burst(
    scheduler: Scheduler,
    held: _HeldReads,
    between: Callable[[asyncio.Task[int]], Awaitable[None]] | None = None,
) -> tuple[asyncio.Task[int], list[object], int]:
    """One call whose read is held, ``BESIDE`` calls made during it, then the read released
    (after ``between(first)`` when given): the first task, the others' outcomes, the tool's runs."""
    ran = 0

    async def tool(attempt: Attempt) -> int:
        nonlocal ran
        ran += 1
        return 1

    first = asyncio.create_task(scheduler.submit(ToolCall("t", call_id="first"), tool))
    await asyncio.to_thread(held.started.wait, 10.0)
    others = [
        asyncio.create_task(scheduler.submit(ToolCall("t", call_id=f"c{i}"), tool)) for i in range(BESIDE)
    ]
    await held.all_reached.wait()
    if between is not None:
        await between(first)
    held.release()
    outcomes = await asyncio.gather(*others, return_exceptions=True)
    await asyncio.wait([first])
    return first, list(outcomes), ran


def _config() -> SchedulerConfig:
    return SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=60.0))


async def _never(attempt: Attempt) -> int:
    raise AssertionError("refused calls never run")


async def _closed_and_read(scheduler: Scheduler) -> None:
    """The key's local breaker closed, its row read once, and that read older than 0.25 s."""

    async def ok(attempt: Attempt) -> int:
        return 1

    assert await scheduler.submit(ToolCall("t"), ok) == 1
    assert scheduler.breaker(KEY).state is BreakerState.CLOSED
    scheduler._breaker_seen.clear()  # the last read more than 0.25 s ago


async def test_calls_during_a_read_wait_for_the_store_saying_open(store: Store) -> None:
    """Review R95 (1): another process opened the breaker; a burst of calls after a quiet spell
    is refused whole, not only the call that read the row (the others ran on the failing
    backend). One read served them all."""
    scheduler = Scheduler(_config(), store=store)
    try:
        await _closed_and_read(scheduler)
        SharedBreakers(store).publish(KEY, "open", time.time())  # the other process's failures
        held = _HeldReads(scheduler)
        first, outcomes, ran = await _burst(scheduler, held)
        assert isinstance(first.exception(), CircuitOpen)
        assert [type(outcome) for outcome in outcomes] == [CircuitOpen] * BESIDE
        assert ran == 0
        assert held.reads == 1
    finally:
        await scheduler.aclose()


async def test_calls_during_a_read_wait_for_the_store_saying_closed(store: Store) -> None:
    """Review R95 (2): another process's probe closed the breaker this process still holds open;
    a burst of calls runs whole, not refused by the stale local breaker."""
    scheduler = Scheduler(_config(), store=store)
    other = SharedBreakers(store)
    try:
        await _closed_and_read(scheduler)
        opened = time.time() - 2.0
        other.publish(KEY, "open", opened)
        scheduler._breaker_seen.clear()
        with pytest.raises(CircuitOpen):  # this process adopts the opening
            await scheduler.submit(ToolCall("t"), _never)
        other.publish(KEY, "closed", opened + 1.0)  # the other process's probe succeeded
        scheduler._breaker_seen.clear()
        held = _HeldReads(scheduler)
        first, outcomes, ran = await _burst(scheduler, held)
        assert first.result() == 1
        assert outcomes == [1] * BESIDE
        assert ran == 1 + BESIDE
        assert scheduler.breaker(KEY).state is BreakerState.CLOSED
    finally:
        await scheduler.aclose()


async def test_a_reader_cancelled_leaves_the_read_to_the_waiting_calls(store: Store) -> None:
    """Review R95: the call reading the row is cancelled during the read; the calls waiting for
    it neither wait for ever nor get its ``CancelledError``: one of them reads for all of them,
    and the store's "open" refuses them all."""
    scheduler = Scheduler(_config(), store=store)
    try:
        await _closed_and_read(scheduler)
        SharedBreakers(store).publish(KEY, "open", time.time())
        held = _HeldReads(scheduler)

        async def cancel(first: asyncio.Task[int]) -> None:
            first.cancel()
            await asyncio.wait([first])

        first, outcomes, ran = await _burst(scheduler, held, cancel)
        assert first.cancelled()
        assert [type(outcome) for outcome in outcomes] == [CircuitOpen] * BESIDE
        assert ran == 0
        assert held.reads == 2  # the cancelled caller's, then one for all the others
    finally:
        await scheduler.aclose()


async def test_an_error_of_the_read_is_every_waiting_calls_error(store: Store) -> None:
    """Review R95: a read that fails with an error other than the store's (which the local
    breaker absorbs) fails the calls that waited for it as it fails its reader; none of them
    runs the tool on the local state in the meantime."""
    scheduler = Scheduler(_config(), store=store)
    try:
        await _closed_and_read(scheduler)
        error = RuntimeError("the read failed")
        held = _HeldReads(scheduler, error)
        first, outcomes, ran = await _burst(scheduler, held)
        assert first.exception() is error
        assert outcomes == [error] * BESIDE
        assert ran == 0
        assert held.reads == 1
    finally:
        await scheduler.aclose()


async def test_a_reader_cancelled_as_its_read_ends_leaves_the_key_due(store: Store) -> None:
    """R95's regression review: the row read, its reader cancelled before it resumed (in the same
    turn of the loop) adopted nothing, yet the key was marked read: for 0.25 s the calls after it
    skipped the read and ran on the local breaker the store said was open. Now a read whose row
    was not adopted leaves the key due, and the next calls read it again."""
    scheduler = Scheduler(_config(), store=store)
    try:
        await _closed_and_read(scheduler)
        SharedBreakers(store).publish(KEY, "open", time.time())
        loop = asyncio.get_running_loop()
        assert scheduler._shared_breakers is not None
        read, blocking = scheduler._shared_breakers.read, scheduler._blocking
        ended: list[asyncio.Future[object]] = []
        row: list[object] = []

        def first_read_held(function: Callable[..., object], *args: object) -> asyncio.Future[object]:
            if function == read and not ended:
                row.append(function(*args))  # read now; handed over when the test says
                ended.append(loop.create_future())
                return ended[0]
            return blocking(function, *args)  # type: ignore[arg-type]

        scheduler._blocking = first_read_held  # type: ignore[assignment, method-assign]
        first = asyncio.create_task(scheduler.submit(ToolCall("t", call_id="first"), _never))
        while not ended:
            await asyncio.sleep(0)
        ended[0].set_result(row[0])
        first.cancel()  # the read ended; its reader cancelled before it resumed
        await asyncio.wait([first])
        assert first.cancelled()
        outcomes = await asyncio.gather(
            *(scheduler.submit(ToolCall("t", call_id=f"c{i}"), _never) for i in range(BESIDE)),
            return_exceptions=True,
        )
        assert [type(outcome) for outcome in outcomes] == [CircuitOpen] * BESIDE
    finally:
        await scheduler.aclose()
