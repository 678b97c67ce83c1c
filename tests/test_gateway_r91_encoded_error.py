"""Review R91: an error answer sent with a ``Content-Encoding`` is quoted by the gateway's pool as
the dispatcher's own clients quote it, ``(a body with Content-Encoding: gzip, not decoded)``,
never as its compressed bytes.

The pool (``UpstreamPool``, the transport of every plain-http backend behind the gateway) heeded
a ``Content-Encoding`` only on a successful answer. An error answer's body went to
``BackendClient`` as raw bytes with no word of its encoding, so a backend answering 400 gzipped
had the caller told ``HTTP 400: \\x08\\x00...``, escaped gzip noise, JSON and stream alike, where
the aiohttp and httpx paths say the body was not decoded. The header is quoted scrubbed of the
prompt before it is cut, as on those paths.
"""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import pytest
from test_dispatch_backends import _client_on, _read_request

from agentgate.errors import DispatchError

SECRET = "078-05-1120"
PROMPT = f"my SSN is {SECRET}, card 4111"
_GZIPPED = gzip.compress(b'{"error": {"message": "bad request: temperature out of range"}}')


def _answering(encoding: bytes) -> Any:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-encoding: "
            + encoding
            + b"\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(_GZIPPED)
            + _GZIPPED
        )
        await writer.drain()
        writer.close()

    return answer


async def _rejection(path: str, encoding: bytes, stream: bool) -> str:
    """What ``path``'s client raises for a gzipped 400 whose ``Content-Encoding`` is ``encoding``."""
    payload = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    async with _client_on(path, _answering(encoding)) as client, asyncio.timeout(10):
        with pytest.raises(DispatchError) as raised:
            if stream:
                async for _ in client.stream(payload):
                    pass
            else:
                await client.chat(payload)
    return str(raised.value)


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
async def test_the_pool_says_an_encoded_error_body_was_not_decoded(stream: bool) -> None:
    message = await _rejection("gateway-pool", b"gzip", stream)
    assert message == "b0 rejected the request: HTTP 400: (a body with Content-Encoding: gzip, not decoded)"
    assert message == await _rejection("httpx", b"gzip", stream)
    assert message == await _rejection("aiohttp", b"gzip", stream)


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
async def test_the_pool_quotes_an_error_answers_encoding_scrubbed_of_the_prompt(stream: bool) -> None:
    echo = f"gzip, {PROMPT}".encode()
    message = await _rejection("gateway-pool", echo, stream)
    assert "[redacted]" in message and "not decoded" in message, message
    assert SECRET[:5] not in message and "4111" not in message, message
    assert message == await _rejection("httpx", echo, stream)
