"""Review R89: a stream's head and first chunk are waited for ``first_token_s``, only the gaps
between later chunks ``idle_s``, over the dispatcher's aiohttp pool and over httpx.

An engine sends a stream's head at once and its first chunk only after the prefill (vLLM,
Starlette). Both clients' transport read timeout was ``idle_s``, which ran from the head to the
first token too: a first token slower than ``idle_s`` but within ``first_token_s`` failed the
stream (the backend marked down, the call failed over), over aiohttp said to be silence for
``first_token_s``, over httpx a bare ``ReadTimeout``. A stream that misses either deadline now
fails naming the one it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from test_dispatch_r68_kept_alive import _STREAM_HEAD, _chunked, _event, client_of

from agentgate.dispatch.backends import Timeouts
from agentgate.errors import BackendFailed

PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 10}
TIMEOUTS = Timeouts(connect_s=2, first_token_s=5, idle_s=0.1, answer_max_s=10, decode_tokens_per_s=1000)
PREFILL_S = 0.5
"""How long the backend takes to its first token: past ``idle_s``, well within ``first_token_s``."""
_DONE = _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


@contextlib.asynccontextmanager
async def backend(first: bytes, rest: bytes | None) -> AsyncIterator[str]:
    """A backend that reads a request, sends its stream's head at once and ``first`` after
    ``PREFILL_S``, then ``rest`` (``None``: nothing, the connection held open, silent)."""
    handlers: list[asyncio.Task[None]] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_STREAM_HEAD)
            await writer.drain()
            await asyncio.sleep(PREFILL_S)
            writer.write(first)
            if rest is not None:
                writer.write(rest)
            await writer.drain()
            await reader.read()  # until the client hangs up
        writer.close()

    def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.create_task(answer(reader, writer)))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


async def _streamed(url: str, pool: str, timeouts: Timeouts) -> str:
    async with client_of(url, pool, timeouts) as client:
        return "".join([chunk.content async for chunk in client.stream(PAYLOAD)])


@pytest.mark.parametrize("pool", ["aiohttp", "httpx"])
async def test_a_first_token_slower_than_idle_s_within_first_token_s_is_served(pool: str) -> None:
    """The head at once, the first token ``PREFILL_S`` later (past ``idle_s``), the rest with it:
    the stream is served whole."""
    first = _chunked(_event("hello") + _event(" there"))
    async with backend(first, _DONE) as url:
        assert await _streamed(url, pool, TIMEOUTS) == "hello there"


@pytest.mark.parametrize("pool", ["aiohttp", "httpx"])
async def test_a_stream_without_a_first_token_fails_naming_first_token_s(pool: str) -> None:
    """The head, then nothing at all: the stream fails at ``first_token_s``, said to be that, not
    at ``idle_s`` as silence for ``first_token_s`` (aiohttp) or a bare ``ReadTimeout`` (httpx)."""
    timeouts = Timeouts(connect_s=2, first_token_s=0.3, idle_s=0.1, answer_max_s=10)
    async with backend(b"", None) as url:
        with pytest.raises(
            BackendFailed, match=r"^junk: no first token within 0\.3s of the request \(first_token_s\)$"
        ):
            await _streamed(url, pool, timeouts)


@pytest.mark.parametrize("pool", ["aiohttp", "httpx"])
async def test_a_stream_silent_after_its_first_token_fails_naming_idle_s(pool: str) -> None:
    """The head, a first token ``PREFILL_S`` later, then nothing: the stream fails at ``idle_s``
    after that chunk, said to be that."""
    async with backend(_chunked(_event("hello")), None) as url:
        with pytest.raises(
            BackendFailed, match=r"^junk: stream silent for 0\.1s after its last chunk \(idle_s\)$"
        ):
            await _streamed(url, pool, TIMEOUTS)
