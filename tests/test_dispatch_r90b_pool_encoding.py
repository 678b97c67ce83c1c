"""Regression review of R90: the gateway's pool quotes a refused ``Content-Encoding`` as the other
client paths do, scrubbed of the prompt as it came, then cut to 40 characters and escaped.

R90 made ``_encoding_shown`` scrub the header before cutting and escaping it, on the httpx and
aiohttp paths. The gateway's pool (``UpstreamPool``, the transport of every plain-http backend
behind the gateway) still cut it to 40 bytes and wrote it with ``unicode_escape`` in its
``UpstreamError``, which the client scrubbed after: an echo holding a character past ASCII
(``Jos\\xe9``) was redacted only up to it and the rest of the prompt quoted, and a prompt's
start in the last 7 of the 40 was kept. The pool now hands the header on as sent
(``EncodedAnswer``), and the client quotes it with ``_encoding_shown``, as on its own paths.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_dispatch_backends import _client_on, _read_request

from agentgate.dispatch.backends import EncodedAnswer
from agentgate.dispatch.gateway._upstream import UpstreamError, UpstreamPool
from agentgate.errors import BackendFailed

SECRET = "078-05-1120"
CASES = {  # the prompt, and the Content-Encoding header echoing it, as sent
    "latin-1-byte": (f"José SSN {SECRET} card 4111", f"x, Jos\xe9 SSN {SECRET} card 4111".encode("latin-1")),
    "utf-8": (f"José SSN {SECRET} card 4111", f"x, José SSN {SECRET} card 4111".encode()),
    "tab": (f"SSN\t{SECRET} and card 4111", f"SSN\t{SECRET} and card 4111".encode()),
    "start-at-the-cut": (
        f"{SECRET} is my SSN",
        f"gzip, br, deflate, compress, zstd, {SECRET} is my SSN".encode(),
    ),
}


def _answering(header: bytes, status: bytes) -> Any:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 "
            + status
            + b"\r\ncontent-type: application/json\r\ncontent-encoding: "
            + header
            + b"\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
        )
        await writer.drain()
        writer.close()

    return answer


async def _refusal(path: str, prompt: str, header: bytes, stream: bool, status: bytes = b"200 OK") -> str:
    """The error ``path``'s client raises for an answer ``status`` with ``header`` for its
    ``Content-Encoding``, to a call of ``prompt``."""
    payload = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
    async with _client_on(path, _answering(header, status)) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            if stream:
                async for _ in client.stream(payload):
                    pass
            else:
                await client.chat(payload)
    return str(raised.value)


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
@pytest.mark.parametrize(("prompt", "header"), CASES.values(), ids=CASES.keys())
async def test_the_pool_quotes_a_refused_encoding_as_httpx_does(
    prompt: str, header: bytes, stream: bool
) -> None:
    message = await _refusal("gateway-pool", prompt, header, stream)
    assert "[reda" in message, message
    assert SECRET[:5] not in message and "4111" not in message, message
    assert message == await _refusal("httpx", prompt, header, stream)


async def test_the_pools_error_carries_the_header_as_sent() -> None:
    """Used alone, the pool's error names the encoding (40 characters, escaped), and holds the
    header whole for the client to quote scrubbed."""
    header = "gzip\t" + "x" * 100

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            f"HTTP/1.1 200 OK\r\ncontent-encoding: {header}\r\ncontent-length: 2\r\n\r\n{{}}".encode()
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    pool = UpstreamPool()
    try:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
        with pytest.raises(UpstreamError, match=r"Content-Encoding: gzip\\tx{35}, which") as raised:
            await pool.post(url, b"{}")
    finally:
        await pool.aclose()
        server.close()
    assert isinstance(raised.value, EncodedAnswer) and raised.value.encoding == header
