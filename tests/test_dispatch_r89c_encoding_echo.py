"""A regression review of R89: a ``Content-Encoding`` header echoing the prompt is quoted scrubbed.

An answer sent with a ``Content-Encoding`` other than ``identity`` is refused, quoting the header
(``_refuse_encoded``). When the prompt stopped being scrubbed from the whole message (``_shown``)
and was scrubbed where the backend's words enter it instead, that header was left out: a backend
echoing the prompt's start there put it in the ``BackendFailed`` over httpx and aiohttp, chat and
stream alike, and so in the gateway's log and the model call's audit outcome.
"""

from __future__ import annotations

import asyncio

import pytest
from test_dispatch_backends import _client_on, _read_request

from agentgate.errors import BackendFailed

SECRET = "078-05-1120"
PROMPT = f"My SSN is {SECRET}, please summarize"


async def _echoing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A backend answering 200 with the prompt's start as its ``Content-Encoding``."""
    await _read_request(reader)
    writer.write(
        f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: {PROMPT[:30]}\r\n"
        "content-length: 2\r\nconnection: close\r\n\r\n{}".encode()
    )
    await writer.drain()
    writer.close()


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
@pytest.mark.parametrize("path", ["httpx", "aiohttp", "gateway-pool"])
async def test_a_content_encoding_echoing_the_prompt_is_refused_with_the_prompt_redacted(
    path: str, stream: bool
) -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    async with _client_on(path, _echoing) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            if stream:
                async for _ in client.stream(payload):
                    pass
            else:
                await client.chat(payload)
    message = str(raised.value)
    assert "Content-Encoding" in message
    assert "[redacted]" in message
    assert SECRET[:5] not in message and "My SSN" not in message


async def test_a_content_encoding_that_is_no_echo_is_quoted_as_sent() -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}

    async def gzip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    async with _client_on("httpx", gzip) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed, match=r"answered with Content-Encoding: gzip, which"):
            await client.chat(payload)
