"""Review R61: a backend's transport failure reads on one line.

aiohttp reports an answer its parser refuses (a bad status line, a bad chunk size, a bad header)
as ``ClientResponseError`` whose text quotes the parser's message with ``repr``: its line breaks
and the caret line under the quoted bytes came out as ``\\n  b'zz'\\n    ^`` in the
``BackendFailed`` (and so in logs and a model call's audit outcome), under a status of 400 the
backend never sent. The message is now one line of words: ``NAME: ClientResponseError: the
answer is not HTTP that can be read: Invalid character in chunk size: b'zz'``. Real HTTP on
127.0.0.1, over the dispatcher's aiohttp session and over httpx.
"""

from __future__ import annotations

from collections.abc import Iterator

import _http
import pytest
from test_dispatch_r61_backend_garbage import NAME, PAYLOAD, Garbage, dispatcher_of
from test_gateway_hostile_backends import _json

from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.dispatch.inventory import inventory_from_mapping
from agentgate.errors import BackendFailed, DispatchError

REPLIES: dict[str, tuple[bytes, str]] = {
    "status_line": (b"HTTP/1.1 2x0 OK\r\n\r\n", "Bad status line"),
    "not_http": (b"hello there\r\n\r\n", "Bad status line"),
    "content_length": (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhi", "Content-Length"),
    "header_token": (b"HTTP/1.1 200 OK\r\nX-A\x00: 1\r\nContent-Length: 2\r\n\r\nhi", "header"),
    "chunk_size": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n",
        "chunk size",
    ),
}
"""Answers no HTTP parser reads, each with a word its failure names."""


@pytest.fixture
def garbage() -> Iterator[Garbage]:
    made = Garbage()
    yield made
    made.close()


def _one_line(message: str) -> None:
    assert "\n" not in message and "\r" not in message, message
    assert "\\n " not in message, message  # a quoted line break before the next line's indent
    assert not message.rstrip().endswith("^"), message
    assert "400" not in message, message  # no status the backend never sent


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("case", sorted(REPLIES))
async def test_an_unreadable_answer_fails_on_one_line_over_aiohttp(
    garbage: Garbage, case: str, streamed: bool
) -> None:
    """Review R61: over the dispatcher's aiohttp session, an answer the parser refuses is a
    ``BackendFailed`` naming the backend and what the parser found, on one line, with no
    quoted line breaks, caret or status the backend never sent."""
    garbage.reply, said = REPLIES[case]
    async with dispatcher_of(garbage.url) as (dispatcher, _):
        with pytest.raises(BackendFailed, match=f"{NAME}: .*{said}") as caught:
            if streamed:
                async for _ in dispatcher.stream({**PAYLOAD, "stream": True}):
                    pass
            else:
                await dispatcher.chat(PAYLOAD)
    _one_line(str(caught.value))


@pytest.mark.parametrize("case", sorted(REPLIES))
async def test_an_unreadable_answer_fails_on_one_line_over_httpx(garbage: Garbage, case: str) -> None:
    """Review R61: over httpx (a ``BackendClient`` without an aiohttp session) the failure is one
    line too."""
    garbage.reply = REPLIES[case][0]
    backend = inventory_from_mapping(
        {"backends": [{"name": NAME, "url": garbage.url, "engine": "vllm", "models": ["small"]}]}
    ).backends[0]
    async with _http.AsyncClient() as http:
        client = BackendClient(backend, http, Timeouts(first_token_s=2, idle_s=0.5))
        with pytest.raises(BackendFailed, match=f"^{NAME}: ") as caught:
            await client.chat(PAYLOAD)
    _one_line(str(caught.value))


ERROR_BODIES: dict[str, tuple[bytes, type[DispatchError], str]] = {
    "html_502": (
        _json(
            b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\n</body>\n</html>\n",
            "502 Bad Gateway",
            "text/html",
        ),
        BackendFailed,
        "HTTP 502: <html> <head><title>502 Bad Gateway</title></head> <body> </body> </html>",
    ),
    "pretty_400": (
        _json(b'{\n  "error": {\n    "message": "max_tokens is too large"\n  }\n}', "400 Bad Request"),
        DispatchError,
        'HTTP 400: { "error": { "message": "max_tokens is too large" } }',
    ),
}
"""Error answers whose bodies span lines (an nginx page, a pretty-printed JSON error), each with
the error raised and the words it quotes."""


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("case", sorted(ERROR_BODIES))
async def test_an_error_body_over_several_lines_is_quoted_on_one(
    garbage: Garbage, case: str, streamed: bool
) -> None:
    """Review R61: the start of an error answer's body is quoted with its line breaks (and the
    runs of spaces around them) each one space: an nginx 502 page was quoted over five lines."""
    garbage.reply, error, quoted = ERROR_BODIES[case]
    async with dispatcher_of(garbage.url) as (dispatcher, _):
        with pytest.raises(error) as caught:
            if streamed:
                async for _ in dispatcher.stream({**PAYLOAD, "stream": True}):
                    pass
            else:
                await dispatcher.chat(PAYLOAD)
    assert quoted in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
