"""Review R68 of the deadlines of a backend that stalls: before its answer's head, or after it.

A raw loopback server reads the call, sends ``sent`` (nothing, the head alone, the head and one
event) and then nothing more, holding the connection open. Each case must end in the
``BackendFailed`` docs/dispatch.md names for it, over the dispatcher's aiohttp pool and over
httpx, well within a generous bound (``HANG_S``): a non-streamed answer at ``Timeouts.answer_s``,
a stream's head and first chunk at ``first_token_s``, a later chunk at ``idle_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from test_dispatch_r68_kept_alive import _STREAM_HEAD, _chunked, _event, client_of

from agentgate.dispatch.backends import Timeouts
from agentgate.errors import BackendFailed

TIMEOUTS = Timeouts(connect_s=2, first_token_s=0.3, idle_s=0.5, answer_max_s=3, decode_tokens_per_s=1000)
PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 100}
"""``answer_s``: 0.3 + 100 / 1000 = 0.4 s."""
HANG_S = 10.0
"""Far past every deadline here: a call still running then is taken to hang."""

_WHOLE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"

CASES: list[tuple[str, bool, bytes, str]] = [
    ("no_head", False, b"", r"junk: no answer within 0\.4s"),
    ("head_then_nothing", False, _WHOLE_HEAD, r"junk: (no answer within 0\.4s|.*Timeout)"),
    ("part_of_body", False, _WHOLE_HEAD + b'{"id": ', r"junk: (no answer within 0\.4s|.*Timeout)"),
    ("no_head", True, b"", r"junk: no answer within 0\.3s"),
    (
        "head_then_nothing",
        True,
        _STREAM_HEAD,
        r"junk: no first token within 0\.3s of the request \(first_token_s\)",
    ),
    (
        "one_chunk",
        True,
        _STREAM_HEAD + _chunked(_event("a")),
        r"junk: stream silent for 0\.5s after its last chunk \(idle_s\)",
    ),
]


@contextlib.asynccontextmanager
async def stalling(sent: bytes) -> AsyncIterator[str]:
    """A backend that reads a request, sends ``sent`` and holds the connection, silent."""
    handlers: list[asyncio.Task[None]] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(sent)
            await writer.drain()
            await reader.read()  # until the client hangs up
        writer.close()

    def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.create_task(hold(reader, writer)))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


@pytest.mark.parametrize("pool", ["aiohttp", "httpx"])
@pytest.mark.parametrize(("case", "stream", "sent", "failure"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
async def test_a_stalled_backend_fails_the_call_at_its_documented_deadline(
    case: str, stream: bool, sent: bytes, failure: str, pool: str
) -> None:
    """Review R68: a backend silent before its head, after it, or after a first chunk ends the
    call in the documented ``BackendFailed``, never a hang (checked against ``HANG_S``)."""
    async with stalling(sent) as url, client_of(url, pool, TIMEOUTS) as client:
        with pytest.raises(BackendFailed, match=failure):
            async with asyncio.timeout(HANG_S):
                if stream:
                    async for _ in client.stream(PAYLOAD):
                        pass
                else:
                    await client.chat(PAYLOAD)
