"""The gateway's lean connection pool to its backends (agentgate/dispatch/gateway/_upstream.py,
``UpstreamPool``): an answer that is not whole is an UpstreamError, never passed on as whole; answers
and lines are bounded while they arrive; a connection is reused only while it is framed, kept alive,
fresh and its pool open; a header value with a line break is refused before anything is sent.

Real loopback HTTP: a hand-written backend (an asyncio server) that writes each answer by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from agentgate.dispatch.backends import MAX_ANSWER_BYTES
from agentgate.dispatch.gateway._upstream import UpstreamError, UpstreamPool
from agentgate.errors import AnswerTooLarge

Answer = Callable[[asyncio.StreamWriter], Awaitable[bool]]
"""Writes one answer; returns whether the connection stays open for another request."""


class _Backend:
    """A loopback server that reads each request (head and Content-Length body) and lets
    ``answer`` write the answer by hand; counts the connections it accepted."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.handlers: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        for writer in self.writers:
            writer.close()
        self.server.close()
        if self.handlers:  # each ends at the end of its connection, closed just now
            await asyncio.wait(self.handlers, timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self.handlers.append(task)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                length = next(
                    int(line.split(":")[1])
                    for line in head.split("\r\n")
                    if line.lower().startswith("content-length")
                )
                await reader.readexactly(length)
                if not await self.answer(writer):
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


async def _ok(writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    await writer.drain()
    return True


@pytest.mark.parametrize(
    "head",
    [b"Content-Length: 200", b"Transfer-Encoding: Chunked"],
    ids=["content-length", "chunked-capitalised"],
)
def test_an_answer_cut_short_of_its_framing_is_an_upstream_error_not_a_whole_answer(head: bytes) -> None:
    """Kills: connection_lost took any answer ended by the connection as complete (the ``_framed``
    test dropped), and: ``Transfer-Encoding: Chunked`` (capitalised) not recognised as framing.

    Rule: an answer that announced its length (Content-Length, or chunked in any spelling) and
    whose connection closes before that length arrived is a failure (UpstreamError, so the
    dispatcher fails over or answers 502), never a complete answer: a valid JSON prefix of a
    longer body must not reach the caller as a 200, charged as if whole."""
    whole = b'{"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}'
    body = whole if b"Content-Length" in head else b"%x\r\n%s\r\n" % (len(whole) + 50, whole)

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n" + body)
        await writer.drain()
        return False  # closes the connection: the announced length never arrives

    async def scenario() -> None:
        async with _Backend(answer) as url:
            pool = UpstreamPool()
            with pytest.raises(UpstreamError, match="closed the connection"):
                await pool.post(url, b"{}")
            await pool.aclose()

    _run(scenario)


def _connections_for_two_calls(answer: bytes) -> int:
    """How many connections two calls through one pool open to a backend that answers each with
    ``answer`` and keeps its socket open afterwards."""

    async def answering(writer: asyncio.StreamWriter) -> bool:
        writer.write(answer)
        await writer.drain()
        return True  # the backend lingers: the socket stays open

    async def scenario() -> int:
        backend = _Backend(answering)
        async with backend as url:
            pool = UpstreamPool()
            assert await pool.post(url, b"{}") == (200, b"{}", None)
            assert await pool.post(url, b"{}") == (200, b"{}", None)
            await pool.aclose()
            return backend.connections

    return asyncio.run(scenario())


def test_an_answer_whose_chunked_framing_is_capitalised_keeps_its_connection() -> None:
    """Kills: ``Transfer-Encoding: Chunked`` (capitalised) not recognised as framing.

    Rule: a chunked answer (the header's value is case-insensitive, RFC 9112) that allows
    keep-alive leaves its connection in the pool for the next call."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    assert _connections_for_two_calls(head) == 1


def test_a_connection_whose_answer_said_close_is_never_reused() -> None:
    """Kills: ``reusable`` ignoring keep-alive (a connection put back in the pool after an answer
    with ``Connection: close``).

    Rule: after an answer that says ``Connection: close`` the gateway sends nothing more on that
    connection, even while the backend has not closed it yet (it may close it under the next
    request, which would then fail, or be read as another's answer)."""
    head = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    assert _connections_for_two_calls(head) == 2


def test_an_idle_connection_older_than_idle_s_is_not_reused() -> None:
    """Kills: ``_take`` reusing any open idle connection, however old.

    Rule: a kept-alive connection idle for ``idle_s`` or more is closed instead of reused (a
    backend's own keep-alive timeout may close it under the next request)."""

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        return True

    async def scenario() -> None:
        backend = _Backend(answer)
        async with backend as url:
            # Fresh for a minute, so that a loaded machine's pause between the two calls cannot
            # age it (with 50 ms, one could); then 50 ms, and idle twice that.
            pool = UpstreamPool(idle_s=60.0)
            assert await pool.post(url, b"{}") == (200, b"{}", None)
            assert await pool.post(url, b"{}") == (200, b"{}", None)
            assert backend.connections == 1  # reused while fresh
            pool.idle_s = 0.05
            await asyncio.sleep(0.1)
            assert await pool.post(url, b"{}") == (200, b"{}", None)
            assert backend.connections == 2
            await pool.aclose()

    _run(scenario)


def test_a_connection_whose_call_ends_after_the_pool_closed_is_closed_not_kept() -> None:
    """Kills: ``_release`` keeping a connection for reuse after ``aclose`` (the ``_closed`` test
    dropped).

    Rule: once the pool is closed (the gateway's lifespan ended), a call still in flight gives
    its connection back to no one: it is closed when the call ends, so the backend sees the
    connection end (no socket left open past the gateway's shutdown)."""
    answered = asyncio.Event()

    async def answer(writer: asyncio.StreamWriter) -> bool:
        await answered.wait()
        return await _ok(writer)

    async def scenario() -> None:
        backend = _Backend(answer)
        async with backend as url:
            pool = UpstreamPool()
            call = asyncio.create_task(pool.post(url, b"{}"))
            for _ in range(500):
                if backend.connections:
                    break
                await asyncio.sleep(0.01)
            await pool.aclose()
            answered.set()
            assert await call == (200, b"{}", None)  # the call in flight is answered
            done, _ = await asyncio.wait(backend.handlers, timeout=5)
            assert len(done) == 1  # and its connection closed: the backend read its end

    _run(scenario)


def test_an_answer_over_the_size_limit_without_a_length_is_refused_while_it_arrives() -> None:
    """Kills: the running count of an answer's body bytes not checked (``_read`` over
    ``MAX_ANSWER_BYTES`` ignored).

    Rule: a chunked answer (no Content-Length to refuse up front) is read no further than
    ``MAX_ANSWER_BYTES``: past it the call is an ``AnswerTooLarge`` (the call's own doing, review
    R57) and the connection closed, never an unbounded buffer held whole in the gateway's memory."""
    piece = b"x" * (1 << 20)
    chunks = MAX_ANSWER_BYTES // len(piece) + 2

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(chunks):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def scenario() -> None:
        async with _Backend(answer) as url:
            pool = UpstreamPool()
            with pytest.raises(AnswerTooLarge, match="larger than"):
                await pool.post(url, b"{}")
            await pool.aclose()

    _run(scenario)


def test_a_streamed_line_over_max_line_is_refused_while_it_arrives() -> None:
    """Kills: ``split_lines`` no longer checking the unfinished line against its limit.

    Rule: a streamed answer's line is held no longer than ``max_line`` bytes: a backend that
    sends a longer one (here 16 KiB, its end not yet arrived, against a 1 KiB limit) gets an UpstreamError, not the line
    buffered whole and handed on."""

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for part in (b"data: " + b"x" * 8192, b"x" * 8192 + b"\n\n"):  # the line's end comes later
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            await asyncio.sleep(0.1)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def scenario() -> None:
        async with _Backend(answer) as url:
            pool = UpstreamPool(max_line=1024)
            with pytest.raises(UpstreamError, match="over 1024 bytes"):
                async with pool.stream(url, b"{}") as (status, _, lines, _):
                    assert status == 200
                    async for _ in lines:
                        pass
            await pool.aclose()

    _run(scenario)


def test_a_backend_key_with_a_line_break_is_refused_not_written_as_a_header() -> None:
    """Kills: ``_head`` no longer checking the ``authorization`` value's characters.

    Rule: the backend's key (``api_key_env`` / ``api_key_file``) is written as one header line;
    a value holding a line break (a key file's stray CR/LF, or an injected header) is an
    UpstreamError that quotes neither the key nor the value, and nothing is sent."""

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        return True

    async def scenario() -> None:
        backend = _Backend(answer)
        async with backend as url:
            pool = UpstreamPool()
            with pytest.raises(UpstreamError) as raised:
                await pool.post(url, b"{}", "Bearer sk-secret\r\nX-Injected: 1")
            assert "sk-secret" not in str(raised.value) and "Injected" not in str(raised.value)
            assert backend.connections == 0
            await pool.aclose()

    _run(scenario)


@pytest.mark.parametrize(
    "headers",
    [{"traceparent": "00-abc\r\nX-Injected: 1"}, {"X-Injected: 1\r\ntraceparent": "00-abc"}],
    ids=["value", "name"],
)
def test_a_trace_header_with_a_line_break_is_refused_before_anything_is_sent(headers: dict[str, str]) -> None:
    """Kills: ``_header_lines`` no longer checking a header value's characters.

    Rule: the call's extra headers (its trace context) are written as one line each; a name or
    value holding a line break (which would end the header and inject another, or end the head
    and smuggle a request) is an UpstreamError quoting neither, and no connection is opened."""

    async def scenario() -> None:
        backend = _Backend(_ok)
        async with backend as url:
            pool = UpstreamPool()
            with pytest.raises(UpstreamError) as raised:
                await pool.post(url, b"{}", headers=headers)
            assert "Injected" not in str(raised.value)
            assert backend.connections == 0
            # A clean trace header goes through on the same pool.
            assert await pool.post(url, b"{}", headers={"traceparent": "00-abc"}) == (200, b"{}", None)
            await pool.aclose()

    _run(scenario)


_INTERIM = {
    "100-continue": b"HTTP/1.1 100 Continue\r\n\r\n",
    "103-early-hints": b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
    "two-interims": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
}


@pytest.mark.parametrize("interim", list(_INTERIM.values()), ids=list(_INTERIM))
def test_an_interim_answer_before_the_final_one_is_read_past_not_taken_as_the_answer(interim: bytes) -> None:
    """Kills: ``on_headers_complete`` taking the first head read as the answer's: a ``103 Early
    Hints`` (a proxy's, or a server's) or an unasked ``100 Continue`` came back as the call's
    status with an empty body, so every call through such a backend failed as a malformed
    completion (aiohttp and httpx, on the dispatcher's side, read past it).

    Rule: a client reads past any number of 1xx answers to the final one (RFC 9110, 15.2); the
    final answer is the call's, streamed or not, and its connection is kept as after any other."""
    whole = b'{"id":"x","choices":[]}'

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(interim)
        await writer.drain()
        await asyncio.sleep(0.05)  # the final answer in reads of its own
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(whole), whole))
        await writer.drain()
        return True

    async def scenario() -> None:
        backend = _Backend(answer)
        async with backend as url:
            pool = UpstreamPool()
            assert await pool.post(url, b"{}") == (200, whole, None)
            async with pool.stream(url, b"{}") as (status, _, lines, _):
                assert status == 200
                assert [line async for line in lines] == [whole.decode()]
            assert backend.connections == 1  # one connection carried both calls
            await pool.aclose()

    _run(scenario)


def test_a_switch_of_protocol_is_an_upstream_error_not_an_empty_answer() -> None:
    """Kills: httptools' ``HttpParserUpgrade`` (not an ``HttpParserError``) escaping
    ``data_received`` to the event loop, which logged a fatal protocol error with its traceback,
    while the call came back as an empty answer of status 101.

    Rule: a backend that answers ``101 Switching Protocols`` (to a request that asked for no
    upgrade) gave no answer: the call is an UpstreamError saying so."""

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
        await writer.drain()
        return True

    async def scenario() -> None:
        async with _Backend(answer) as url:
            pool = UpstreamPool()
            with pytest.raises(UpstreamError, match="switched protocols"):
                await pool.post(url, b"{}")
            await pool.aclose()

    _run(scenario)


def test_a_second_answer_to_one_request_is_not_read_into_it_nor_its_connection_kept() -> None:
    """Kills: the parser read on past the end of an answer: a backend that wrote two answers to
    one request (in one write) had the second's body appended to the first's, so a valid
    completion came back as garbage (a failed call, its backend marked down), and the connection
    went back to the pool, desynchronised: what it sent next could be taken for the answer to
    another caller's request.

    Rule: an answer is the bytes of one HTTP message; one that nothing asked for ends that
    connection (the answer read before it is whole and stands), and the next call opens another."""
    calls = 0

    async def twice(writer: asyncio.StreamWriter) -> bool:
        nonlocal calls
        calls += 1
        own, extra = b'{"call":%d}' % calls, b'{"call":"nobody"}'
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(own), own)
            + b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(extra), extra)
        )
        await writer.drain()
        return True

    async def scenario() -> None:
        backend = _Backend(twice)
        async with backend as url:
            pool = UpstreamPool()
            assert await pool.post(url, b"{}") == (200, b'{"call":1}', None)
            assert await pool.post(url, b"{}") == (200, b'{"call":2}', None)
            assert backend.connections == 2  # the first connection was not used again
            await pool.aclose()

    _run(scenario)


@pytest.mark.parametrize("status", [400, 503])
def test_an_error_answer_declaring_a_body_over_the_size_limit_is_quoted_not_refused(status: int) -> None:
    """Kills: the up-front Content-Length bound applied to every answer: a 400 (the caller's bad
    request) declaring a body over ``MAX_ANSWER_BYTES`` became an UpstreamError, so a
    ``BackendFailed`` that failed the call over and marked the backend down, where any other 400
    is the caller's ``DispatchError``.

    Rule: only an answer read whole (status under 300) is refused for its declared length; an
    error answer's start is read and returned with its status, whatever length it declares."""

    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 %d Nope\r\nContent-Length: %d\r\n\r\n" % (status, MAX_ANSWER_BYTES + 1))
        await writer.drain()
        await asyncio.sleep(0.05)  # the body after the head, as a backend's own writes come
        writer.write(b'{"error": "too long a prompt"}')
        await writer.drain()
        return False

    async def scenario() -> None:
        async with _Backend(answer) as url:
            pool = UpstreamPool()
            got, body, _ = await pool.post(url, b"{}")
            assert (got, body) == (status, b'{"error": "too long a prompt"}')
            await pool.aclose()

    _run(scenario)
