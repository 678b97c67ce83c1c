"""Review R89: ``Gate.adispatch_stream`` and ``Gate.dispatch_stream`` queued every chunk of the
dispatcher's stream for their reader without a bound: a reader that read slowly (a LangGraph
``"messages"`` consumer relaying to a slow client) had the whole answer read from the backend
and piled up in the process's memory, where the gateway reads at most ``STREAM_AHEAD`` chunks
ahead of its caller. The gate now reads the dispatcher's stream at most ``STREAM_AHEAD`` chunks
ahead of its reader too, reads on as the reader takes them, and closes the stream when the reader
leaves. A reader that stops reading holds its call until the gate closes, which ends its stream
as it ends one being read (``BackendFailed`` after output), never leaving it waiting for ever.

Real components: a Gate on a SQLite file (``test_gate``'s policy) and its dispatcher loop thread;
a stand-in dispatcher whose stream yields chunks as fast as they are asked for, and a real
``Dispatcher`` over loopback HTTP to a ``SimServer`` for the close."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from test_gate import Setup
from test_gate_r87_attach_dispatcher import _StandIn
from test_gate_r87_attach_dispatcher import setup as setup  # the fixture

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch._answers import ChatChunk
from agentgate.errors import BackendFailed
from agentgate.gate._dispatching import _PUMPS, STREAM_AHEAD
from agentgate.sim import SimServer

MOST = 100_000
"""The most chunks the stand-in's stream yields (without a bound, all of them are read)."""
MODEL = "llama-3.1-8b"
PAYLOAD = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}


class _Eager(_StandIn):
    """A dispatcher whose stream yields up to ``MOST`` chunks as fast as it is read (``produced``
    counts them); ``closed_stream`` is set when the stream is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.produced = 0
        self.closed_stream = threading.Event()

    async def stream(self, payload: Any, *, tenant: str, session: str | None) -> AsyncIterator[ChatChunk]:
        try:
            while self.produced < MOST:
                self.produced += 1
                yield ChatChunk(content="x")
                await asyncio.sleep(0)
        finally:
            self.closed_stream.set()


def _read_ahead(eager: _Eager) -> int:
    """The chunks the stream yielded, once it stopped being read ahead (up to 0.5 s)."""
    deadline = time.monotonic() + 0.5
    while eager.produced <= STREAM_AHEAD + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return eager.produced


def _read_slowly(setup: Setup, eager: _Eager) -> int:
    """Read one chunk of ``dispatch_stream``, stop a while, then read three times ``STREAM_AHEAD``
    more and leave: the chunks read ahead while the reader stopped."""
    stream = setup.gate.dispatch_stream({"model": "m"})
    assert next(stream).content == "x"
    ahead = _read_ahead(eager)
    for _ in range(3 * STREAM_AHEAD):
        assert next(stream).content == "x"
    stream.close()
    return ahead


async def _aread_slowly(setup: Setup, eager: _Eager) -> int:
    stream = setup.gate.adispatch_stream({"model": "m"})
    assert (await anext(stream)).content == "x"
    ahead = await asyncio.to_thread(_read_ahead, eager)  # this loop keeps running meanwhile
    for _ in range(3 * STREAM_AHEAD):
        assert (await anext(stream)).content == "x"
    await stream.aclose()
    return ahead


@pytest.mark.parametrize("reader", ["dispatch_stream", "adispatch_stream"])
def test_a_slow_reader_has_the_stream_read_a_bounded_way_ahead(setup: Setup, reader: str) -> None:
    eager = _Eager()
    setup.gate.attach_dispatcher(cast(Dispatcher, eager))
    if reader == "dispatch_stream":
        ahead = _read_slowly(setup, eager)
    else:
        ahead = asyncio.run(_aread_slowly(setup, eager))
    assert ahead <= STREAM_AHEAD + 2  # until R89: all MOST chunks, read while one was taken
    assert eager.closed_stream.wait(5.0)  # the reader left: the stream is closed
    assert eager.produced < MOST


def _a_pump_waits(setup: Setup) -> bool:
    """Whether the pump of a stream of ``setup``'s gate waits for its reader (up to 5 s)."""
    assert setup.gate._dispatch is not None
    loop = setup.gate._dispatch[1]
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        pumps = _PUMPS.get(loop)  # made by the loop's thread, read here
        if pumps is not None and pumps.waiting:
            return True
        time.sleep(0.01)
    return False


def _read_to_the_end(stream: Iterator[ChatChunk], ended: list[BaseException]) -> None:
    try:
        for _ in stream:
            pass
    except BackendFailed as exc:
        ended.append(exc)


async def _aread_after_the_close(setup: Setup, ended: list[BaseException]) -> None:
    stream = setup.gate.adispatch_stream(PAYLOAD)
    await anext(stream)
    assert await asyncio.to_thread(_a_pump_waits, setup)
    await asyncio.to_thread(setup.gate.close)
    try:
        async with asyncio.timeout(5.0):  # a pump left waiting: for ever
            async for _ in stream:
                pass
    except BackendFailed as exc:
        ended.append(exc)


@pytest.mark.parametrize("reader", ["dispatch_stream", "adispatch_stream"])
def test_closing_the_gate_ends_the_stream_of_a_reader_that_stopped(tmp_path: Path, reader: str) -> None:
    # The pump that waits for its reader reads on when the gate closes: the close ends its
    # stream as it ends one being read, after the chunks read ahead. Left waiting, it would be
    # dropped with the dispatcher's loop, and its reader would wait for the next chunk for ever.
    with SimServer(time_scale=0.1) as server:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]}
        )
        setup = Setup(tmp_path)
        try:
            setup.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
            ended: list[BaseException] = []
            if reader == "dispatch_stream":
                stream = setup.gate.dispatch_stream(PAYLOAD)
                next(stream)
                assert _a_pump_waits(setup)
                setup.gate.close()
                rest = threading.Thread(target=_read_to_the_end, args=(stream, ended), daemon=True)
                rest.start()
                rest.join(5.0)  # a pump left waiting: for ever
            else:
                asyncio.run(_aread_after_the_close(setup, ended))
        finally:
            setup.gate.close()
    assert len(ended) == 1 and isinstance(ended[0], BackendFailed) and ended[0].after_output
