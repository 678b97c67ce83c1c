"""Regression review of R89: the read-ahead bound of ``Gate.dispatch_stream`` and
``adispatch_stream`` (``_Ahead``) handed a callback to the dispatcher's loop from the reader's
thread for every chunk taken (``call_soon_threadsafe``: a lock, a write to the loop's self-pipe,
a wake-up of its thread), though the pump waits for its reader only once it is ``STREAM_AHEAD``
chunks ahead. The count is now kept under a lock, and a chunk taken wakes the pump's loop only
when the pump waits, once however many are taken before it runs. The bound itself, and the pump
reading on as the reader takes chunks, are unchanged (test_gate_r89_stream_ahead).

Real components: a Gate on a SQLite file (``test_gate``'s policy) and its dispatcher loop thread,
a stand-in dispatcher whose stream yields a few chunks; and ``_Ahead`` alone, on a loop of this
test, taken from on another thread as a reader takes chunks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
from test_gate import Setup
from test_gate_r87_attach_dispatcher import _StandIn
from test_gate_r87_attach_dispatcher import setup as setup  # the fixture

from agentgate.dispatch import Dispatcher
from agentgate.dispatch._answers import ChatChunk
from agentgate.gate._dispatching import _PUMPS, STREAM_AHEAD, _Ahead

CHUNKS = STREAM_AHEAD // 2
"""Chunks of a stream shorter than the bound: its pump never waits for its reader."""


def _counting(monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop) -> list[threading.Thread]:
    """Count the callbacks handed to ``loop`` from other threads: the thread of each."""
    handed: list[threading.Thread] = []
    hand = loop.call_soon_threadsafe

    def counted(callback: Callable[..., object], *args: Any, **kwargs: Any) -> asyncio.Handle:
        handed.append(threading.current_thread())
        return hand(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    return handed


def _waiting(loop: asyncio.AbstractEventLoop) -> set[_Ahead]:
    """The ``_Ahead`` of each pump of ``loop`` that waits for its reader."""
    pumps = _PUMPS.get(loop)  # made as the first pump waits
    return set() if pumps is None else pumps.waiting


def _taken_on_a_thread(ahead: _Ahead, count: int) -> None:
    """``count`` chunks taken by a reader on a thread of its own, as ``dispatch_stream``'s."""
    reader = threading.Thread(target=lambda: [ahead.taken() for _ in range(count)])
    reader.start()
    reader.join()


async def test_chunks_taken_while_the_pump_reads_on_wake_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    ahead = _Ahead()
    for _ in range(STREAM_AHEAD):
        await ahead.room()
    handed = _counting(monkeypatch, asyncio.get_running_loop())
    _taken_on_a_thread(ahead, 10)
    assert handed == []  # until the review: one callback per chunk taken, 10
    async with asyncio.timeout(5.0):  # room for the 10 taken, none waited for
        for _ in range(10):
            await ahead.room()


async def test_a_waiting_pump_is_woken_once_by_chunks_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    ahead = _Ahead()
    for _ in range(STREAM_AHEAD):
        await ahead.room()
    pump = asyncio.create_task(ahead.room())
    async with asyncio.timeout(5.0):
        while ahead not in _waiting(loop):  # the pump waits for its reader
            await asyncio.sleep(0)
    handed = _counting(monkeypatch, loop)
    _taken_on_a_thread(ahead, 3)
    async with asyncio.timeout(5.0):
        await pump
    assert len(handed) == 1  # one wake for the three taken (until the review: three)
    assert ahead not in _waiting(loop)
    async with asyncio.timeout(5.0):  # room for the two other chunks taken, none waited for
        await ahead.room()
        await ahead.room()
    assert ahead._room is None


class _Short(_StandIn):
    """A dispatcher whose stream yields ``CHUNKS`` chunks."""

    async def stream(self, payload: Any, *, tenant: str, session: str | None) -> AsyncIterator[ChatChunk]:
        for _ in range(CHUNKS):
            yield ChatChunk(content="x")


def test_reading_a_stream_through_the_gate_wakes_its_loop_per_call_not_per_chunk(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup.gate.attach_dispatcher(cast(Dispatcher, _Short()))
    assert setup.gate._dispatch is not None
    handed = _counting(monkeypatch, setup.gate._dispatch[1])
    assert [chunk.content for chunk in setup.gate.dispatch_stream({"model": "m"})] == ["x"] * CHUNKS
    mine = [thread for thread in handed if thread is threading.current_thread()]
    # The call handed over, and its cancel where the reader saw the end before the pump's task
    # ended (``dispatch_stream``'s ``finally``); until the review, one more per chunk taken.
    assert len(mine) <= 2
