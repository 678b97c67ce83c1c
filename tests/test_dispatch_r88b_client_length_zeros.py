"""A backend's ``Content-Length`` written with thousands of leading zeros, read by the
dispatcher's own clients (review R88, the twin of the gateway's fix in
test_keys_r88_content_length_zeros.py).

``_refuse_declared`` and aiohttp's ``content_length`` read the header with ``int()``, which
refuses a text of more than 4,300 digits: a non-streamed answer so sent left
``BackendClient.chat`` as a bare ``ValueError`` (neither failed over nor ``AnswerTooLarge``).
Now the header is read as the gateway's pool reads it (``declared_length``). httpx's parser
refuses such a length itself: a ``BackendFailed``, as docs/dispatch.md says.

A raw loopback backend answers each call with the head and body given."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from test_dispatch_r68_kept_alive import client_of

from agentgate.dispatch.backends import MAX_ANSWER_BYTES
from agentgate.errors import AnswerTooLarge, BackendFailed

_ZEROS = b"0" * 5000
"""More digits than ``int()`` reads (4,300)."""
_WHOLE = (
    b'{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}'
)
PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}]}


@contextlib.asynccontextmanager
async def answering(length: bytes, body: bytes) -> AsyncIterator[str]:
    """A backend that answers a call 200 with ``Content-Length: length`` and ``body``."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %s\r\n\r\n"
            writer.write(head % length + body)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def test_an_answers_length_after_thousands_of_zeros_is_read_as_its_value() -> None:
    async with answering(_ZEROS + b"%d" % len(_WHOLE), _WHOLE) as url, client_of(url, "aiohttp") as client:
        assert (await client.chat(PAYLOAD)).content == "hi"


async def test_a_length_over_the_limit_after_thousands_of_zeros_is_too_large() -> None:
    declared = _ZEROS + b"%d" % (MAX_ANSWER_BYTES + 1)
    async with answering(declared, b"") as url, client_of(url, "aiohttp") as client:
        with pytest.raises(AnswerTooLarge, match="junk: the answer is larger than"):
            await client.chat(PAYLOAD)


async def test_httpx_refuses_a_length_of_thousands_of_digits_as_a_failed_backend() -> None:
    """httpx's parser (h11) refuses the length itself: a ``BackendFailed``, failed over."""
    async with answering(_ZEROS + b"%d" % len(_WHOLE), _WHOLE) as url, client_of(url, "httpx") as client:
        with pytest.raises(BackendFailed, match=r"junk: .*Content-Length"):
            await client.chat(PAYLOAD)
