"""Regression review of R90b: the end of an error body read as cut is left out only where a
prompt's or the key's start could stand there, never the backend's own words.

R90b took every error body as cut at the read unless the read knew it whole, and ``_scrub``'s
``cut`` left out the last 7 characters not redacted whatever they were: a short, valid 400 sent
chunked over httpx (or its closing chunk in a later write, or delimited by the connection's
close, on every client path) was quoted as ``max_tokens must be at most``, its ``4096"}`` lost,
though the prompt was ``hi`` and there was no key. Only the longest end that a prompt or the key
(8 characters or longer, in each form the scrub looks for) starts with is left out now.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import _http
import pytest
from test_dispatch_r90b_first_piece_cut import IDS, PATHS, _read_request, _refused

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._redaction import _scrub
from agentgate.dispatch.backends import BackendClient
from agentgate.errors import BackendFailed

BODY = b'{"detail": "max_tokens must be at most 4096"}'


@contextlib.asynccontextmanager
async def _chunked(body: bytes) -> AsyncIterator[str]:
    """A backend answering 400 with ``body`` as one chunk, its closing chunk in a later write."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _read_request(reader)
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n")
            writer.write(b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(body), body))
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def _refusal(url: str, transport: str, stream: bool, prompt: str) -> str:
    payload: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    return await _refused(url, transport, stream, payload)


@pytest.mark.parametrize(("transport", "stream"), PATHS, ids=IDS)
async def test_a_short_body_read_as_cut_is_quoted_to_its_end(transport: str, stream: bool) -> None:
    async with _chunked(BODY) as url:
        message = await _refusal(url, transport, stream, "hi")
    assert message.endswith(f"rejected the request: HTTP 400: {BODY.decode()}"), message


async def test_a_prompt_start_at_the_end_of_a_chunked_body_is_still_left_out() -> None:
    async with _chunked(b'{"detail": "bad input: 078-05-') as url:
        message = await _refusal(url, "httpx", False, "078-05-1120 is my SSN, keep it")
    assert message.endswith('HTTP 400: {"detail": "bad input:'), message


@pytest.mark.parametrize(
    ("text", "key", "prompts", "quoted"),
    [
        ('at most 4096"}', None, [], 'at most 4096"}'),
        ('at most 4096"}', "sk-0123456789abcdef", ["Summarise the report"], 'at most 4096"}'),
        ("said: Summar", None, ["Summarise the report"], "said: "),
        ("said: sk-012", "sk-0123456789abcdef", [], "said: "),
        ("said: \\u00e9t", None, ["\\u00e9t\\u00e9 2024 report"], "said: "),  # its JSON form
        ("said: 4096 Su", None, ["Summarise the report"], "said: 4096 "),
        ("said: abcdef", "abcdefg", ["abcdefg"], "said: abcdef"),  # shorter than 8: not looked for
    ],
)
def test_only_a_start_of_a_secret_is_left_out_of_the_cut_end(
    text: str, key: str | None, prompts: list[str], quoted: str
) -> None:
    assert _scrub(text, key, prompts, cut=True) == quoted


async def test_plain_bytes_of_a_transport_are_quoted_to_their_end() -> None:
    """A ``ChatTransport`` of the caller's giving plain bytes (not ``WholeBody``): nothing in them
    to redact, so nothing is left out."""

    class Busy:
        async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
            return 429, b"busy"

        def stream(self, url: str, body: bytes, authorization: str | None = None) -> Any:
            raise NotImplementedError

    backend = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
    ).backends[0]
    async with _http.AsyncClient() as http:
        client = BackendClient(backend, http)
        client.transport = Busy()
        with pytest.raises(BackendFailed, match=r"HTTP 429: busy$"):
            await client.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
