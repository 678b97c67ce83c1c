"""Regression review of R91b: where an error body is cut at the read, no piece of the API key of
4 characters or more standing at its end is quoted.

R91b read 64 bytes past an error body's first 1,024 and scrubbed them with it, so that an echo
of the key standing across the cut is found whole. That helps only where they came: a first
piece of 1,030 bytes (then a stall), or of 600, ending in the key less its first 4 characters,
had 9 or 15 of them quoted (a piece of the key other than its start is redacted from 16
characters), on httpx, aiohttp and the gateway's pool; and a ``ChatTransport`` returning the
first 1,024 bytes, as its contract still said would do, had the piece at the cut quoted. The
longest end of a body cut at the read, fewer than 16 characters and not redacted, that is a
piece of the key 4 characters or longer is now left out (the key's, not the prompt's: a prompt's
inner piece is words the backend's own may share).
"""

from __future__ import annotations

import asyncio

import _http
import aiohttp
import httpx
import pytest
from _raw_server import RawServer
from test_dispatch_backends import _read_request
from test_dispatch_r91b_inner_key_cut import KEY, _pieces

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import _QUOTED, BackendClient
from agentgate.dispatch.gateway._upstream import UpstreamPool
from agentgate.errors import DispatchError

PROMPT = "Summarise the quarterly report for the board, all of it please."
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
ECHO = KEY[4:].encode()
FIRST_PIECES = {
    "1030-bytes": b"<pre>" + b"\n" * (_QUOTED - 5 - 9) + ECHO[:15],
    "600-bytes": b"<pre>" + b"\n" * (600 - 5 - 15) + ECHO[:15],
    "600-bytes-4-of-it": b"<pre>" + b"\n" * (600 - 5 - 4) + ECHO[7:11],
}


def _client(http: httpx.AsyncClient) -> BackendClient:
    backend = {"name": "b0", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}
    client = BackendClient(inventory_from_mapping({"backends": [backend]}).backends[0], http)
    client._key = KEY
    return client


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
@pytest.mark.parametrize("path", ["httpx", "aiohttp", "gateway-pool"])
@pytest.mark.parametrize("piece", FIRST_PIECES.values(), ids=FIRST_PIECES.keys())
async def test_a_first_piece_ending_in_a_piece_of_the_key_quotes_none_of_it(
    monkeypatch: pytest.MonkeyPatch, piece: bytes, path: str, stream: bool
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 503 Busy\r\ncontent-length: 5000\r\n\r\n" + piece)
        await writer.drain()
        await asyncio.sleep(30)  # the rest never comes; the server's stop ends it

    monkeypatch.setenv("R91C_KEY", KEY)
    server = RawServer(answer)
    url = f"http://127.0.0.1:{await server.start()}"
    backend = {"name": "b0", "url": url, "engine": "vllm", "models": ["m"], "api_key_env": "R91C_KEY"}
    pool = UpstreamPool()
    try:
        async with _http.AsyncClient() as http, aiohttp.ClientSession() as session, asyncio.timeout(10):
            client = BackendClient(
                inventory_from_mapping({"backends": [backend]}).backends[0],
                http,
                session=session if path == "aiohttp" else None,
            )
            if path == "gateway-pool":
                client.transport = pool
            with pytest.raises(DispatchError) as raised:
                if stream:
                    async for _ in client.stream(PAYLOAD):
                        pass
                else:
                    await client.chat(PAYLOAD)
    finally:
        await pool.aclose()
        await server.stop()
    message = str(raised.value)
    assert message.endswith("HTTP 503: <pre>"), message
    assert not _pieces(message, 4), message


class _FirstKiB:
    """A ``ChatTransport`` returning an error body's first ``_QUOTED`` bytes, not ``WholeBody``."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
        return 503, self.body[:_QUOTED]


@pytest.mark.parametrize("before_cut", [4, 9, 15])
async def test_a_transport_returning_the_first_kib_quotes_no_piece_of_the_key(before_cut: int) -> None:
    body = b"<pre>" + b"\n" * (_QUOTED - 5 - before_cut) + ECHO + b"</pre>"
    async with _http.AsyncClient() as http:
        client = _client(http)
        client.transport = _FirstKiB(body)
        with pytest.raises(DispatchError) as raised:
            await client.chat(PAYLOAD)
    assert str(raised.value).endswith("HTTP 503: <pre>"), raised.value
    assert not _pieces(str(raised.value), 4), raised.value


@pytest.mark.parametrize(
    "end",
    [
        "max_tokens must be at most 4096",
        f"code {KEY[6:9]}",  # 3 characters of the key: too few to leave out
        "Summarise the quarterly",  # a prompt's start: left out
        "the quarterly report",  # a prompt's inner piece: the backend's words may hold it
    ],
    ids=["own-words", "three-of-the-key", "prompt-start", "prompt-inner-piece"],
)
async def test_a_body_cut_at_the_read_keeps_its_own_words(end: str) -> None:
    async with _http.AsyncClient() as http:
        said = _client(http)._excerpt(f'{{"error": "{end}'.encode(), PAYLOAD)
    assert said == ('{"error": "[redacted]' if end.startswith("Summarise") else f'{{"error": "{end}'), said
