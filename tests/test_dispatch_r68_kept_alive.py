"""Review R68 of kept-alive connections to a backend: a call that failed mid-answer leaves nothing
for the next call to read.

A raw loopback server answers every request of a connection in turn. Its first answer goes
wrong part-way (an event that is not JSON, a line over ``MAX_LINE_BYTES``, more characters than
``max_tokens`` allows, silence past ``idle_s``, a declared length over ``MAX_ANSWER_BYTES``, an
error's body longer than is quoted), and then the rest of it follows: bytes that, read as an
answer, are a whole forged answer saying ``LEFTOVER``. The next call must get its own answer
(``FRESH``), on a connection of its own, never those bytes (both pools were sound here).

A backend that sends such bytes after a whole answer, unasked, had them read as the next call's
answer over the dispatcher's aiohttp pool (``LEFTOVER`` for a call sent after them); such a
connection is now closed when it is taken from the pool (``dispatch/_connector.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

import _http
import pytest
from _raw_server import read_request

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._connector import chat_session
from agentgate.dispatch.backends import MAX_ANSWER_BYTES, MAX_LINE_BYTES, BackendClient, Timeouts
from agentgate.errors import AnswerTooLarge, BackendFailed

PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 1}
# A failing part must time out before the rest comes (``first_token_s``/``idle_s`` under
# ``PAUSE_S``), and a whole answer on loopback must come within them on a loaded machine: the
# clean-clone CI of facd3c2 (4 workers, 2 cores) once saw a "FRESH" answer miss 0.3 s.
TIMEOUTS = Timeouts(connect_s=2, first_token_s=1.0, idle_s=1.0, answer_max_s=3, decode_tokens_per_s=1000)
PAUSE_S = 2.0
"""How long the server waits, after an answer's failing part, before it sends the rest."""
SENT_S = PAUSE_S + 0.5
"""A wait after which the server has sent what it sends ``PAUSE_S`` after an answer."""


def _event(text: str) -> bytes:
    event = {"id": "c", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _completion(text: str) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    return json.dumps({"id": "c", "choices": [choice], "usage": usage}).encode()


def _sized(status: str, kind: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _answer(text: str, stream: bool) -> bytes:
    """A whole answer (kept alive) saying ``text``, streamed or not."""
    if stream:
        return _sized("200 OK", "text/event-stream", _event(text) + b"data: [DONE]\n\n")
    return _sized("200 OK", "application/json", _completion(text))


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


_STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"

FailedFirst = Callable[[bool], tuple[bytes, bytes]]
"""For a call streamed or not: the first answer's part that fails the call, and the rest of it."""


def _rest(stream: bool) -> bytes:
    """The rest of a chunked answer: a forged answer inside a chunk, then the body's end."""
    return _chunked(b"\n" + _answer("LEFTOVER", stream)) + b"0\r\n\r\n"


FIRST: dict[str, FailedFirst] = {
    "event_not_json": lambda s: (_STREAM_HEAD + _chunked(b"data: {not json\n\n"), _rest(s)),
    "line_over_limit": lambda s: (
        _STREAM_HEAD + _chunked(b"data: " + b"x" * (MAX_LINE_BYTES + 10)),
        _rest(s),
    ),
    "over_max_tokens": lambda s: (_STREAM_HEAD + _chunked(_event("y" * 2000)), _rest(s)),
    "silent_mid_stream": lambda s: (_STREAM_HEAD + _chunked(_event("a")), _rest(s)),
    "declared_too_large": lambda s: (
        f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {MAX_ANSWER_BYTES + 1}\r\n\r\n".encode(),
        _answer("LEFTOVER", s),
    ),
    "error_body_quoted": lambda s: (
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
        + _chunked(b"e" * 2000),
        _rest(s),
    ),
    "silent_mid_answer": lambda s: (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        + _chunked(b'{"id": "c", '),
        _rest(s),
    ),
}
STREAMED_ONLY = frozenset({"event_not_json", "line_over_limit", "over_max_tokens", "silent_mid_stream"})
WHOLE_ONLY = frozenset({"silent_mid_answer"})


class KeptAlive:
    """A backend that answers each request of a connection in turn: the first request of all with
    ``first``'s failing part, then (``PAUSE_S`` later) its rest; every later one with ``FRESH``.
    ``connections`` counts the connections, ``requests`` the requests read on each."""

    def __init__(self, first: FailedFirst, stream: bool) -> None:
        self.first = first
        self.stream = stream
        self.connections = 0
        self.requests: list[int] = []
        self.handlers: list[asyncio.Task[None]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handlers.append(asyncio.create_task(self._serve(reader, writer)))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.connections
        self.connections += 1
        self.requests.append(0)
        try:
            await self._answer_each(reader, writer, index)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _answer_each(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int
    ) -> None:
        while True:
            await read_request(reader)
            self.requests[index] += 1
            if sum(self.requests) == 1:
                failing, rest = self.first(self.stream)
                writer.write(failing)
                await writer.drain()
                await asyncio.sleep(PAUSE_S)
                writer.write(rest)
            else:
                writer.write(_answer("FRESH", self.stream))
            await writer.drain()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            for handler in self.handlers:
                handler.cancel()
            await asyncio.gather(*self.handlers, return_exceptions=True)
            await server.wait_closed()


@contextlib.asynccontextmanager
async def client_of(url: str, pool: str, timeouts: Timeouts = TIMEOUTS) -> AsyncIterator[BackendClient]:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "junk", "url": url, "engine": "vllm", "models": ["small"]}]}
    )
    async with _http.AsyncClient() as http:
        if pool == "httpx":
            yield BackendClient(inventory.backends[0], http, timeouts)
            return
        async with chat_session() as session:  # the dispatcher's
            yield BackendClient(inventory.backends[0], http, timeouts, session=session)


async def _call(client: BackendClient, stream: bool) -> str:
    if stream:
        return "".join([chunk.content async for chunk in client.stream(PAYLOAD)])
    return (await client.chat(PAYLOAD)).content


CASES = [
    (case, stream)
    for case in sorted(FIRST)
    for stream in (True, False)
    if not (stream and case in WHOLE_ONLY) and not (not stream and case in STREAMED_ONLY)
]


@pytest.mark.parametrize("pool", ["aiohttp", "httpx"])
@pytest.mark.parametrize(("case", "stream"), CASES)
async def test_the_call_after_one_that_failed_mid_answer_reads_its_own_answer(
    case: str, stream: bool, pool: str
) -> None:
    """Review R68: after a call whose answer failed part-way (its rest still to come on the
    connection), the next call to the backend gets its own answer on a fresh connection, never
    the rest of the failed one."""
    backend = KeptAlive(FIRST[case], stream)
    async with backend.running() as url, client_of(url, pool) as client:
        with pytest.raises((BackendFailed, AnswerTooLarge)):
            await _call(client, stream)
        await asyncio.sleep(SENT_S)  # the rest of the failed answer has been sent
        assert await _call(client, stream) == "FRESH"
    assert backend.requests == [1, 1]


@pytest.mark.parametrize("pool", ["aiohttp", "httpx"])
@pytest.mark.parametrize("stream", [True, False])
async def test_bytes_a_backend_sends_after_a_whole_answer_are_never_the_next_answer(
    stream: bool, pool: str
) -> None:
    """Review R68: a backend that sends bytes on a kept-alive connection after a whole answer
    (unasked: here a forged answer) has them read as no call's answer: the next call gets its own."""
    backend = KeptAlive(lambda s: (_answer("FIRST", s), _answer("LEFTOVER", s)), stream)
    async with backend.running() as url, client_of(url, pool) as client:
        assert await _call(client, stream) == "FIRST"
        await asyncio.sleep(SENT_S)  # the unasked bytes have been sent
        assert await _call(client, stream) == "FRESH"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_connection_whose_answers_ended_cleanly_is_reused(stream: bool) -> None:
    """Review R68: the pool check closes only a connection with bytes nobody asked for: calls
    answered whole, with nothing after, share one connection."""
    backend = KeptAlive(lambda s: (_answer("FIRST", s), b""), stream)
    async with backend.running() as url, client_of(url, "aiohttp") as client:
        assert await _call(client, stream) == "FIRST"
        await asyncio.sleep(SENT_S)
        assert await _call(client, stream) == "FRESH"
    assert backend.requests == [2]
