"""Review R94: a streamed answer was read ahead of its reader by up to ``STREAM_AHEAD`` (64)
chunks, whatever their size: a backend sending events of 1 MiB (``MAX_LINE_BYTES``), each some
twenty times that once decoded, had a caller that stopped reading hold over 1.5 GB of the
gateway's memory for ``stream_stall_s``. The read-ahead is now bounded by the events' sizes as the
backend sent them too (``STREAM_AHEAD_BYTES``), one event always let through however large, by one
mechanism (``_Ahead``) for the gateway's streams (``gated_stream``) and the gate's
(``dispatch_stream``, ``adispatch_stream``).

Real components: a ``GatewayGate`` on a SQLite file (``test_gateway_backpressure``'s) reading
events parsed by the stream reader (``_parse_chunk``) from a backend that yields as fast as it is
read; a Gate with a stand-in dispatcher on its loop thread; and ``_Ahead`` alone. The pump's
progress is counted in events pulled, never timed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from test_gate import Setup
from test_gate_r87_attach_dispatcher import _StandIn
from test_gate_r87_attach_dispatcher import setup as setup  # the fixture
from test_gateway_backpressure import allowed_model_call

from agentgate.dispatch import Dispatcher
from agentgate.dispatch._answers import ChatChunk
from agentgate.dispatch._sse import MAX_LINE_BYTES, _parse_chunk
from agentgate.gate._dispatching import _PUMPS, STREAM_AHEAD, STREAM_AHEAD_BYTES, _Ahead

EVENT = '{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"pad":"%s"}' % (
    "p" * (300 << 10)
)
"""An event of 300 KiB as the backend sends it (the pad not counted as answer characters)."""
FIT = STREAM_AHEAD_BYTES // len(EVENT)
"""How many such events fit the read-ahead bound: 3, far fewer than ``STREAM_AHEAD``."""


def _large() -> ChatChunk:
    chunk = _parse_chunk("b", EVENT)
    assert chunk is not None and chunk.size == len(EVENT)  # the reader says what it holds
    return chunk


def test_the_bound_counts_bytes_and_lets_one_chunk_of_any_size_through() -> None:
    assert FIT < STREAM_AHEAD

    async def scenario() -> None:
        ahead = _Ahead()
        await ahead.room(MAX_LINE_BYTES + 1)  # nothing ahead: one chunk passes, however large
        waiting = asyncio.create_task(ahead.room(1))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()  # over the bytes, though one chunk of 64 is ahead
        ahead.taken(MAX_LINE_BYTES + 1)
        async with asyncio.timeout(5.0):
            await waiting
        for _ in range(STREAM_AHEAD - 1):  # small chunks: the count still bounds them
            await ahead.room(1)
        counted = asyncio.create_task(ahead.room(0))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not counted.done()
        counted.cancel()

    asyncio.run(scenario())


def test_gated_stream_stops_pulling_large_events_at_the_byte_bound(tmp_path: Path) -> None:
    with allowed_model_call(tmp_path) as (gate, _agent, decision):
        produced = 0

        async def backend() -> AsyncIterator[ChatChunk]:
            nonlocal produced
            while True:
                produced += 1
                yield _large()
                await asyncio.sleep(0)

        async def scenario() -> None:
            stream = gate.gated_stream(decision.auth, backend())
            assert (await anext(stream)).content == "x"
            for _ in range(50):  # the caller does not read; the backend reader gets every chance
                await asyncio.sleep(0)
            # The one taken, FIT queued, one held by the pump waiting for room: until R94, 66.
            assert produced == 1 + FIT + 1
            for _ in range(3 * FIT):  # read on: the stream flows again
                assert (await anext(stream)).content == "x"
            await stream.aclose()

        asyncio.run(scenario())


class _Large(_StandIn):
    """A dispatcher whose stream yields 300 KiB events as fast as it is read (``produced``)."""

    def __init__(self) -> None:
        super().__init__()
        self.produced = 0

    async def stream(self, payload: Any, *, tenant: str, session: str | None) -> AsyncIterator[ChatChunk]:
        while True:
            self.produced += 1
            yield _large()
            await asyncio.sleep(0)


def test_dispatch_stream_stops_pulling_large_events_at_the_byte_bound(setup: Setup) -> None:
    large = _Large()
    setup.gate.attach_dispatcher(cast(Dispatcher, large))
    attached = setup.gate._dispatch
    assert attached is not None
    stream = setup.gate.dispatch_stream({"model": "m"})
    assert next(stream).content == "x"
    waits = threading.Event()

    def check() -> None:  # on the dispatcher's loop, where its pumps are kept
        pumps = _PUMPS.get(attached[1])
        if pumps is not None and pumps.waiting:
            waits.set()
        else:
            attached[1].call_soon(check)

    attached[1].call_soon_threadsafe(check)
    assert waits.wait(5.0)  # the pump waits for its reader
    # The one taken, FIT read ahead, one held by the pump waiting (the first chunk may be taken
    # on this thread after the pump first waits): until R94 it first waited at 66.
    assert large.produced <= 1 + FIT + 1
    for _ in range(3 * FIT):
        assert next(stream).content == "x"
    stream.close()
