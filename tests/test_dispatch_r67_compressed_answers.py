"""Review R67: a backend's compressed answer is refused, never decompressed.

aiohttp (the dispatcher's session, and so the gateway's https backends) and httpx (probes,
scrapes, a ``BackendClient`` without a session) asked for gzip (and deflate, br, zstd) and
decompressed each network read whole before any bound of agentgate's applied: 128 KiB of gzip
from a backend became 128 MiB in memory in one piece, however the answer was then refused. A
backend is now asked for ``Accept-Encoding: identity`` and an answer sent with any other
``Content-Encoding`` is a ``BackendFailed`` naming it, before any of its body is decoded.
Real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import tracemalloc
import zlib
from collections.abc import Iterator

import _http
import pytest
from _raw_server import RawServer
from test_dispatch_r61_backend_garbage import NAME, PAYLOAD, TIMEOUTS, Garbage, dispatcher_of
from test_gateway_hostile_backends import _head

from agentgate.dispatch.backends import BackendClient
from agentgate.dispatch.gateway._upstream import UpstreamError, UpstreamPool
from agentgate.dispatch.inventory import inventory_from_mapping
from agentgate.errors import BackendFailed

_UNPACKED = 128 << 20


@functools.cache
def _gzip_bomb() -> bytes:
    """``_UNPACKED`` bytes of a JSON string, gzipped (about 128 KiB), made without holding them;
    once, by the first test that sends it (made at import until review R81, it cost each worker's
    collection 0.8 CPU-s)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"x": "')]
    block = b"a" * (1 << 20)
    parts += [packer.compress(block) for _ in range(_UNPACKED >> 20)]
    parts += [packer.compress(b'"}'), packer.flush()]
    return b"".join(parts)


def _answer(ctype: str) -> bytes:
    packed = _gzip_bomb()
    headers = {"content-type": ctype, "content-encoding": "gzip", "content-length": str(len(packed))}
    return _head("200 OK", headers) + packed


class Recording(Garbage):
    """``Garbage`` that keeps the head of each request it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.heads: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        real = reader.readuntil

        async def readuntil(separator: bytes = b"\n") -> bytes:
            head = await real(separator)
            self.heads.append(head.lower())
            return head

        reader.readuntil = readuntil  # type: ignore[method-assign]
        await super()._serve(reader, writer)


@pytest.fixture
def bomb() -> Iterator[Recording]:
    made = Recording()
    made.reply = _answer("application/json")
    yield made
    made.close()


def _asked_identity(server: Recording) -> bool:
    chat = [h for h in server.heads if h.startswith(b"post ")]
    return bool(chat) and all(b"\r\naccept-encoding: identity\r\n" in h for h in chat)


@contextlib.contextmanager
def _peak_under(limit: int) -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"{peak} bytes held at the peak"


async def test_a_gzip_bomb_over_the_dispatchers_session_is_refused_undecoded(bomb: Recording) -> None:
    """Review R67: ``Dispatcher.chat`` (aiohttp) asks for identity and refuses a gzipped answer
    as a ``BackendFailed`` naming its encoding; before, aiohttp unpacked it (128 MiB) and the
    call ended in ``AnswerTooLarge``."""
    async with dispatcher_of(bomb.url) as (dispatcher, router):
        with _peak_under(16 << 20), pytest.raises(BackendFailed, match=f"{NAME}: .*Content-Encoding: gzip"):
            await dispatcher.chat(PAYLOAD)
        assert router.states[NAME].in_flight == 0
    assert _asked_identity(bomb)


async def test_a_gzip_bomb_stream_over_the_dispatchers_session_is_refused_undecoded(
    bomb: Recording,
) -> None:
    """Review R67: the same for ``Dispatcher.stream``."""
    bomb.reply = _answer("text/event-stream")
    async with dispatcher_of(bomb.url) as (dispatcher, _):
        with _peak_under(16 << 20), pytest.raises(BackendFailed, match=f"{NAME}: .*Content-Encoding: gzip"):
            async for _ in dispatcher.stream({**PAYLOAD, "stream": True}):
                pass
    assert _asked_identity(bomb)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_gzip_bomb_over_httpx_is_refused_undecoded(bomb: Recording, stream: bool) -> None:
    """Review R67: over httpx (a ``BackendClient`` without an aiohttp session) a gzipped answer,
    whole or streamed, is refused before httpx unpacks a read of it (64 MiB and more at once)."""
    if stream:
        bomb.reply = _answer("text/event-stream")
    backend = inventory_from_mapping(
        {"backends": [{"name": NAME, "url": bomb.url, "engine": "vllm", "models": ["small"]}]}
    ).backends[0]
    async with _http.AsyncClient() as http:
        client = BackendClient(backend, http, TIMEOUTS)
        with _peak_under(16 << 20), pytest.raises(BackendFailed, match=f"^{NAME}: .*Content-Encoding: gzip"):
            if stream:
                async for _ in client.stream({**PAYLOAD, "stream": True}):
                    pass
            else:
                await client.chat(PAYLOAD)
    assert _asked_identity(bomb)


async def test_the_gateways_pool_asks_for_identity_and_refuses_an_encoded_answer(bomb: Recording) -> None:
    """Review R67: the gateway's lean pool never decoded an answer, but asked for no encoding
    (so any was acceptable, RFC 9110) and read a gzipped one as a malformed chat completion: it
    now asks for identity and refuses another encoding as such."""
    pool = UpstreamPool()
    try:
        with pytest.raises(UpstreamError, match="Content-Encoding: gzip"):
            await pool.post(bomb.url + "/v1/chat/completions", b"{}")
    finally:
        await pool.aclose()
    assert _asked_identity(bomb)


async def test_gzipped_metrics_are_refused_undecoded() -> None:
    """Review R67: a scrape asks for identity and refuses gzipped metrics, naming the encoding;
    before, httpx unpacked each read whole before the ``MAX_METRICS_CHARS`` bound counted it."""
    heads: list[bytes] = []
    answer = _answer("text/plain")  # made before the scrape's timeout runs

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append((await reader.readuntil(b"\r\n\r\n")).lower())
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = RawServer(serve)
    url = f"http://127.0.0.1:{await server.start()}"
    backend = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": NAME,
                    "url": url,
                    "engine": "vllm",
                    "models": ["small"],
                    "metrics_url": url + "/metrics",
                }
            ]
        }
    ).backends[0]
    try:
        async with _http.AsyncClient() as http:
            client = BackendClient(backend, http, TIMEOUTS)
            with (
                _peak_under(16 << 20),
                pytest.raises(BackendFailed, match=f"^{NAME}: metrics: .*Content-Encoding: gzip"),
            ):
                await client.scrape(0.0)
    finally:
        await server.stop()
    assert heads and b"\r\naccept-encoding: identity\r\n" in heads[0]
