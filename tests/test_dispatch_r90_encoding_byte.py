"""Review R90: an error answer whose ``Content-Encoding`` holds a byte that is not UTF-8 is the
``BackendFailed`` of its status, naming the backend, not a bare ``UnicodeEncodeError``.

An error answer sent with a ``Content-Encoding`` is quoted by words that say so, its body not
decoded. aiohttp keeps a header's byte that is not UTF-8 as a lone surrogate (``\\udcff``), and
those words were encoded as UTF-8: ``BackendClient.chat`` over the dispatcher's own aiohttp
session raised ``UnicodeEncodeError`` (a traceback, no failover, no backend named), and a stream
failed with that error's words instead of ``HTTP 500``. The header is now quoted as a refused
one is: escaped, scrubbed of the prompt, at most 40 characters.
"""

from __future__ import annotations

import asyncio

import pytest
from test_dispatch_backends import _client_on, _read_request

from agentgate.errors import BackendFailed

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


async def _error_with_a_byte_not_utf8(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.write(
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-encoding: gzip\xff\r\n"
        b"content-length: 4\r\nconnection: close\r\n\r\noops"
    )
    await writer.drain()
    writer.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("path", ["aiohttp", "httpx"])
async def test_an_error_answer_with_a_header_byte_not_utf8_is_backend_failed(path: str, stream: bool) -> None:
    async with _client_on(path, _error_with_a_byte_not_utf8) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            if stream:
                async for _ in client.stream(PAYLOAD):
                    pass
            else:
                await client.chat(PAYLOAD)
    message = str(raised.value)
    assert message.startswith("b0: HTTP 500: (a body with Content-Encoding: gzip"), message
    assert message.endswith(", not decoded)") and message.isprintable(), message
    # The byte read as Latin-1 on both paths (aiohttp keeps it as a lone surrogate, read so too
    # since a regression review of R90: tests/test_dispatch_r90b_aiohttp_latin_1_encoding.py).
    assert "gzip\xff, not decoded" in message, message


SECRET = "078-05-1120"
PROMPT = f"{SECRET} is my SSN, keep it"


async def _error_echoing_at_the_cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A 500 whose ``Content-Encoding`` echoes the prompt from its 36th character: 5 characters
    of it stand in the 40 quoted."""
    await _read_request(reader)
    writer.write(
        f"HTTP/1.1 500 Internal Server Error\r\ncontent-encoding: {'x' * 35}{PROMPT}\r\n".encode()
        + b"content-length: 4\r\nconnection: close\r\n\r\noops"
    )
    await writer.drain()
    writer.close()


@pytest.mark.parametrize("path", ["aiohttp", "httpx"])
async def test_an_error_answers_content_encoding_is_scrubbed_before_it_is_cut(path: str) -> None:
    """Scrubbed before the 40 characters are cut from it, as a refused header is: until the review
    it was cut first, and the start of the prompt there was too short to be found."""
    payload = {**PAYLOAD, "messages": [{"role": "user", "content": PROMPT}]}
    async with _client_on(path, _error_echoing_at_the_cut) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            await client.chat(payload)
    message = str(raised.value)
    assert f"Content-Encoding: {'x' * 35}[redacted], not decoded)" in message, message  # a marker kept whole
    assert SECRET[:5] not in message, message
