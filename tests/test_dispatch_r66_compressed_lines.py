"""Review R66: a streamed line over ``MAX_LINE_BYTES`` fails the stream however it arrives.

``split_lines`` checked only the unfinished line it held after each piece: a line that arrived
whole in one piece was yielded whatever its length. Over the lean pool a piece is at most a few
hundred kB, but the dispatcher's aiohttp session and httpx decompress an answer sent with
``Content-Encoding: gzip`` (which they ask for), and a few kB of gzip are megabytes of line: a
backend's 8 MB ``data:`` line was held and parsed whole. Since review R67 a backend is asked for
no encoding and an encoded answer is refused before any of it is decoded
(``test_dispatch_r67_compressed_answers``): these streams fail at their head. Real HTTP on
127.0.0.1."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Iterator

import _http
import pytest
from test_dispatch_r61_backend_garbage import NAME, PAYLOAD, TIMEOUTS, Garbage, dispatcher_of
from test_gateway_hostile_backends import _head

from agentgate.dispatch.backends import BackendClient, split_lines
from agentgate.dispatch.inventory import inventory_from_mapping
from agentgate.errors import BackendFailed

_EVENT = (
    b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * (8 << 20) + b'"}}]}\n\ndata: [DONE]\n\n'
)
_BODY = gzip.compress(_EVENT)
_GZIPPED = (
    _head(
        "200 OK",
        {"content-type": "text/event-stream", "content-encoding": "gzip", "content-length": str(len(_BODY))},
    )
    + _BODY
)


@pytest.fixture
def garbage() -> Iterator[Garbage]:
    made = Garbage()
    made.reply = _GZIPPED
    yield made
    made.close()


async def test_a_gzipped_line_over_the_bound_fails_the_stream_over_aiohttp(garbage: Garbage) -> None:
    """Review R66: over the dispatcher's aiohttp session, an 8 MB line sent as 8 kB of gzip is
    refused as a line over the bound, not held whole and parsed. This one held before the fix
    (aiohttp hands the decompressed answer on in pieces under the bound): pinned beside the
    httpx case, which did not."""
    assert len(_BODY) < 64 * 1024
    async with dispatcher_of(garbage.url) as (dispatcher, _):
        with pytest.raises(BackendFailed, match=f"{NAME}: .*Content-Encoding: gzip"):
            async for _ in dispatcher.stream({**PAYLOAD, "stream": True}):
                pass


async def test_a_gzipped_line_over_the_bound_fails_the_stream_over_httpx(garbage: Garbage) -> None:
    """Review R66: the same over httpx (a ``BackendClient`` without an aiohttp session)."""
    backend = inventory_from_mapping(
        {"backends": [{"name": NAME, "url": garbage.url, "engine": "vllm", "models": ["small"]}]}
    ).backends[0]
    async with _http.AsyncClient() as http:
        client = BackendClient(backend, http, TIMEOUTS)
        with pytest.raises(BackendFailed, match=f"^{NAME}: .*Content-Encoding: gzip"):
            async for _ in client.stream({**PAYLOAD, "stream": True}):
                pass


async def test_a_line_over_the_bound_in_one_piece_is_refused() -> None:
    """Review R66, the reader itself: a line over ``limit`` that arrives whole in one piece is
    refused before it is yielded; a line at the limit, whole in one piece, is yielded."""

    async def pieces(*given: bytes) -> AsyncIterator[bytes]:
        for piece in given:
            yield piece

    with pytest.raises(ValueError, match="a streamed line is over 1024 bytes"):
        async for _ in split_lines(pieces(b"a\n" + b"x" * 1025 + b"\nb\n"), 1024):
            pass
    lines = [line async for line in split_lines(pieces(b"a\r\n" + b"x" * 1024 + b"\rb"), 1024)]
    assert lines == ["a", "x" * 1024, "b"]
