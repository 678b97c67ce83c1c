"""Regression review of R91: a refused ``Content-Encoding`` echoing the API key quotes no piece
of it on a stream's paths and a metrics scrape, as on ``chat``'s.

R91 scrubbed the header of the key before its 40-character cut on every client path
(``_encoding_shown``), but only ``chat`` was tested (``test_dispatch_r91_encoding_key_cut``): a
stream's encoded answer (a success refused for its encoding, and an error whose body is not
decoded) over httpx, aiohttp and the gateway's pool, and a metrics answer refused for its
encoding, which no ``_shown`` scrubs after, had no test.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from _raw_server import RawServer
from test_dispatch_r91_encoding_key_cut import ANSWERS, HEADERS, KEY, _answering, _client_answered

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient
from agentgate.errors import BackendFailed

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8}


def _quotes_the_key(message: str) -> bool:
    return any(KEY[i : i + 3] in message for i in range(len(KEY) - 2))


@pytest.mark.parametrize(("path", "status"), ANSWERS.values(), ids=ANSWERS.keys())
@pytest.mark.parametrize("header", HEADERS.values(), ids=HEADERS.keys())
async def test_a_stream_refused_for_its_encoding_quotes_no_piece_of_the_key(
    monkeypatch: pytest.MonkeyPatch, header: str, path: str, status: bytes
) -> None:
    monkeypatch.setenv("R91_KEY", KEY)
    async with _client_answered(path, _answering(header, status), "R91_KEY") as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            async for _ in client.stream(PAYLOAD):
                pass
    message = str(raised.value)
    assert "Content-Encoding: xxxxx" in message and "[redact" in message, message
    assert not _quotes_the_key(message), message


@pytest.mark.parametrize("header", HEADERS.values(), ids=HEADERS.keys())
async def test_metrics_refused_for_their_encoding_quote_no_piece_of_the_key(
    monkeypatch: pytest.MonkeyPatch, header: str
) -> None:
    async def metrics(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # a GET: no body
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-encoding: %s\r\n"
            b"content-length: 2\r\nconnection: close\r\n\r\n{}" % header.encode()
        )
        await writer.drain()
        writer.close()

    monkeypatch.setenv("R91_KEY", KEY)
    server = RawServer(metrics)
    url = f"http://127.0.0.1:{await server.start()}"
    backend = {
        "name": "b0",
        "url": url,
        "metrics_url": f"{url}/metrics",
        "engine": "vllm",
        "models": ["m"],
        "api_key_env": "R91_KEY",
    }
    try:
        async with httpx.AsyncClient() as http, asyncio.timeout(10):
            client = BackendClient(inventory_from_mapping({"backends": [backend]}).backends[0], http)
            with pytest.raises(BackendFailed) as raised:
                await client.scrape(0.0)
    finally:
        await server.stop()
    message = str(raised.value)
    assert "metrics: answered with Content-Encoding: xxxxx" in message and "[redact" in message, message
    assert not _quotes_the_key(message), message
