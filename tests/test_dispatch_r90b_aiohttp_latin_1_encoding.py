"""Regression review of R90 (found beside the pool's twin): a refused ``Content-Encoding`` whose
bytes are not UTF-8 is scrubbed of the prompt over aiohttp as over httpx and the gateway's pool.

aiohttp reads a header as UTF-8, each byte that is not kept as a lone surrogate: an echo of the
prompt ``José SSN ...`` sent in Latin-1 reached ``_encoding_shown`` as ``Jos\\udce9 SSN ...``,
which is not the prompt's text, so it was redacted only up to ``é`` and the SSN quoted. httpx and
the pool read such a header as Latin-1; so does ``_encoding_shown`` now, before the scrub.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_dispatch_backends import _client_on, _read_request

from agentgate.errors import BackendFailed

SECRET = "078-05-1120"
PROMPT = f"José SSN {SECRET} card 4111"
HEADER = f"x, Jos\xe9 SSN {SECRET} card 4111".encode("latin-1")


def _answering(status: bytes) -> Any:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 "
            + status
            + b"\r\ncontent-type: application/json\r\ncontent-encoding: "
            + HEADER
            + b"\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
        )
        await writer.drain()
        writer.close()

    return answer


async def _refusal(path: str, status: bytes, stream: bool) -> str:
    payload = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    async with _client_on(path, _answering(status)) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            if stream:
                async for _ in client.stream(payload):
                    pass
            else:
                await client.chat(payload)
    return str(raised.value)


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
@pytest.mark.parametrize("status", [b"200 OK", b"500 Internal Server Error"], ids=["refused", "error-answer"])
async def test_a_latin_1_echo_in_a_content_encoding_is_redacted_over_aiohttp(
    status: bytes, stream: bool
) -> None:
    message = await _refusal("aiohttp", status, stream)
    assert "Content-Encoding: x, [redacted]" in message, message
    assert SECRET[:5] not in message and "4111" not in message, message
    assert message == await _refusal("httpx", status, stream)
