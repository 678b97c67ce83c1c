"""Review R91: a refused ``Content-Encoding`` echoing the API key quotes no piece of it.

R90 scrubbed the header of the prompt as it came, before it was cut to 40 characters and escaped
(``_encoding_shown``), but not of the key: the key was scrubbed after, from the message quoting
the 40 characters (``_excerpt`` of an error answer, ``_shown``). A start of the key shorter than
8 characters standing at the cut, or a piece of it shorter than 16 (an echo of 20 before the
cut), is too short to be found there, and was quoted, on every client path, for an error answer
and for a successful one refused for its encoding. The header is now scrubbed of the key with
the prompt, before the cut.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import _http
import aiohttp
import pytest
from _raw_server import Handler, RawServer
from test_dispatch_backends import _read_request

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient
from agentgate.dispatch.gateway._upstream import UpstreamPool
from agentgate.errors import BackendFailed

KEY = "Zq7Vw3XkP9mR2tLs8YbN4cHd"
HEADERS = {  # the Content-Encoding header, the 40 characters quoted of it ending in a piece of the key
    "start-at-the-cut": "x" * 33 + KEY,
    "inner-piece-at-the-cut": "x" * 25 + KEY[4:],
}


def _answering(header: str, status: bytes) -> Handler:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-encoding: %s\r\n"
            b"content-length: 2\r\nconnection: close\r\n\r\n{}" % (status, header.encode())
        )
        await writer.drain()
        writer.close()

    return answer


@contextlib.asynccontextmanager
async def _client_answered(path: str, answer: Handler, key_env: str) -> AsyncIterator[BackendClient]:
    """A ``BackendClient`` with the API key in ``key_env``, over ``path``, of a loopback backend
    whose every connection ``answer`` serves."""
    server = RawServer(answer)
    url = f"http://127.0.0.1:{await server.start()}"
    backend = {"name": "b0", "url": url, "engine": "vllm", "models": ["m"], "api_key_env": key_env}
    pool = UpstreamPool()
    try:
        async with _http.AsyncClient() as http, aiohttp.ClientSession() as session:
            client = BackendClient(
                inventory_from_mapping({"backends": [backend]}).backends[0],
                http,
                session=session if path == "aiohttp" else None,
            )
            if path == "gateway-pool":
                client.transport = pool
            yield client
    finally:
        await pool.aclose()
        await server.stop()


ANSWERS = {  # the client path, and the status answered with the encoding
    "httpx-200": ("httpx", b"200 OK"),
    "httpx-503": ("httpx", b"503 Busy"),
    "aiohttp-200": ("aiohttp", b"200 OK"),
    "aiohttp-503": ("aiohttp", b"503 Busy"),
    "gateway-pool-200": ("gateway-pool", b"200 OK"),
    "gateway-pool-503": ("gateway-pool", b"503 Busy"),  # an error's encoding said (review R91)
}


@pytest.mark.parametrize(("path", "status"), ANSWERS.values(), ids=ANSWERS.keys())
@pytest.mark.parametrize("header", HEADERS.values(), ids=HEADERS.keys())
async def test_a_refused_encoding_quotes_no_piece_of_the_key_at_its_cut(
    monkeypatch: pytest.MonkeyPatch, header: str, path: str, status: bytes
) -> None:
    monkeypatch.setenv("R91_KEY", KEY)
    payload = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8}
    async with _client_answered(path, _answering(header, status), "R91_KEY") as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            await client.chat(payload)
    message = str(raised.value)
    assert "Content-Encoding: xxxxx" in message and "[redact" in message, message
    assert not any(KEY[i : i + 3] in message for i in range(len(KEY) - 2)), message
