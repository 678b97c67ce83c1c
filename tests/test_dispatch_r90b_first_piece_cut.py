"""Regression review of R90: an error body is taken as cut at the read unless it is known whole,
so a prompt's start at the end of the first piece of a body sent in two writes is not quoted.

R90 left out what is not redacted of the last 7 characters of an error body cut at the read, but
took a body as cut only when 1,024 bytes were read. Every client path reads only the first piece
to arrive (httpx's ``_start``, aiohttp's ``content.read(1024)``, the gateway pool's
``read_start``): a body sent in two writes was cut there too, under 1,024 bytes, and a prompt's
start at its end was quoted once the white space before it was folded (``HTTP 400: <pre>
078-05-``). A body is now whole only where the read knows it ended (its ``Content-Length`` read,
the end of its body seen: ``WholeBody``); anything else is taken as cut.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import _http
import aiohttp
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, Timeouts, WholeBody
from agentgate.dispatch.gateway._upstream import UpstreamPool
from agentgate.errors import DispatchError

PROMPT = "078-05-1120 is my SSN, keep it safe"
FIRST = b"<pre>" + b"\n" * 600 + b" 078-05-"
REST = b"1120 is my SSN, keep it safe</pre>"
WHOLE = b'{"detail": "unknown field: temprature"}'


async def _read_request(reader: asyncio.StreamReader) -> None:
    """Reads a client's request, its head and its body, off ``reader``."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)


@contextlib.asynccontextmanager
async def _server(first: bytes, rest: bytes) -> AsyncIterator[str]:
    """A backend answering 400 with ``first`` and, once the client has gone, ``rest``: so the
    client reads ``first`` alone, and the body it declares is longer."""
    handlers: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await _read_request(reader)
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n")
            writer.write(b"Content-Length: %d\r\n\r\n" % (len(first) + len(rest)) + first)
            await writer.drain()
            if rest:
                await asyncio.wait_for(reader.read(1), 5)  # the client closes, having read ``first``
                writer.write(rest)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        if handlers:  # each ends once its client has gone (the test's client is closed by now)
            await asyncio.wait(handlers, timeout=5)
        server.close()


async def _refusal(url: str, transport: str, stream: bool) -> str:
    payload: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
    }
    return await _refused(url, transport, stream, payload)


async def _refused(url: str, transport: str, stream: bool, payload: dict[str, Any]) -> str:
    """What ``payload`` sent to the backend at ``url`` on the ``transport`` path is refused with."""
    backend = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": url, "engine": "vllm", "models": ["m"]}]}
    ).backends[0]
    async with contextlib.AsyncExitStack() as opened:
        http = await opened.enter_async_context(_http.AsyncClient())
        session = (
            await opened.enter_async_context(aiohttp.ClientSession()) if transport == "aiohttp" else None
        )
        client = BackendClient(backend, http, Timeouts(first_token_s=5, idle_s=5), session=session)
        if transport == "pool":
            client.transport = pool = UpstreamPool()
            opened.push_async_callback(pool.aclose)
        with pytest.raises(DispatchError) as raised:
            if stream:
                async for _ in client.stream(payload):
                    pass
            else:
                await client.chat(payload)
    return str(raised.value)


PATHS = [(transport, stream) for transport in ("httpx", "aiohttp", "pool") for stream in (False, True)]
IDS = [f"{transport}-{'stream' if stream else 'chat'}" for transport, stream in PATHS]


@pytest.mark.parametrize(("transport", "stream"), PATHS, ids=IDS)
async def test_a_prompt_start_at_the_end_of_a_first_piece_is_not_quoted(transport: str, stream: bool) -> None:
    async with _server(FIRST, REST) as url:
        message = await _refusal(url, transport, stream)
    assert message.endswith("rejected the request: HTTP 400: <pre>"), message
    assert "078-0" not in message, message


@pytest.mark.parametrize(("transport", "stream"), PATHS, ids=IDS)
async def test_a_body_read_whole_is_quoted_to_its_end(transport: str, stream: bool) -> None:
    async with _server(WHOLE, b"") as url:
        message = await _refusal(url, transport, stream)
    assert message.endswith(f"rejected the request: HTTP 400: {WHOLE.decode()}"), message


@pytest.mark.parametrize("whole", [False, True], ids=["bytes", "whole-body"])
async def test_a_transport_body_is_taken_as_cut_unless_it_says_it_is_whole(whole: bool) -> None:
    """A ``ChatTransport`` of the caller's: plain bytes may be the start of the body only."""

    class Canned:
        async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
            return 400, WholeBody(FIRST) if whole else FIRST

        def stream(self, url: str, body: bytes, authorization: str | None = None) -> Any:
            raise NotImplementedError

    backend = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
    ).backends[0]
    async with _http.AsyncClient() as http:
        client = BackendClient(backend, http)
        client.transport = Canned()
        with pytest.raises(DispatchError) as raised:
            await client.chat({"model": "m", "messages": [{"role": "user", "content": PROMPT}]})
    assert str(raised.value).endswith("HTTP 400: <pre> 078-05-" if whole else "HTTP 400: <pre>"), raised.value
