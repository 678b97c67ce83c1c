"""(Review R48, mutation testing of the gateway's HTTP layer) tests that kill hand-made mutants of
``agentgate/dispatch/gateway/_app.py``, ``_http.py`` and ``_upstream.py`` the suite let live.

Real loopback HTTP throughout: a hand-written backend (an asyncio server) for the lean pool, and
the gateway tests' ``env`` fixture (GatewayServer, simulated vLLM backends, SQLite) for the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from test_gateway import Env, _body, _post
from test_gateway_end_to_end import _body as _r16_body
from test_gateway_hostile_backends import _OK_JSON, Hostile, _json, _settled
from test_gateway_hostile_backends import RESERVED as R16_RESERVED
from test_gateway_hostile_backends import _gateway as _r16_gateway
from test_gateway_shutdown_pipelining import MODEL as PIPE_MODEL
from test_gateway_shutdown_pipelining import _env as _pipe_env

from agentgate.dispatch.backends import MAX_ANSWER_BYTES
from agentgate.dispatch.gateway import _http as gateway_http
from agentgate.dispatch.gateway._app import MAX_BODY_BYTES
from agentgate.dispatch.gateway._http import MAX_HEAD_BYTES
from agentgate.dispatch.gateway._upstream import UpstreamError, UpstreamPool

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

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


# --- the lean pool: a backend's answer that is not whole is never passed on as one -----------------


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
            assert await pool.post(url, b"{}") == (200, b"{}")
            assert await pool.post(url, b"{}") == (200, b"{}")
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
            pool = UpstreamPool(idle_s=0.05)
            assert await pool.post(url, b"{}") == (200, b"{}")
            assert await pool.post(url, b"{}") == (200, b"{}")
            assert backend.connections == 1  # reused while fresh
            await asyncio.sleep(0.1)
            assert await pool.post(url, b"{}") == (200, b"{}")
            assert backend.connections == 2
            await pool.aclose()

    _run(scenario)


# --- the request's bounds: a head sent in pieces, a body sent in parts ----------------------------


def _raw_request(env: Env, pieces: list[bytes]) -> bytes:
    """Send ``pieces`` to the gateway one ``sendall`` at a time (a short pause between, so that
    each tends to be a read of its own), then read the answer until the connection closes."""
    port = env.server.port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in pieces:
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break  # refused and closed meanwhile: the answer is already there
            time.sleep(0.005)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return received


def test_a_request_head_sent_in_small_pieces_is_bounded_as_a_whole(env: Env) -> None:
    """Kills: the head's byte count set to each read's size instead of added up.

    Rule: ``MAX_HEAD_BYTES`` bounds the whole request head, however many reads it arrives in: a
    head of 100 header lines of 1 KiB (over 64 KiB in all, each piece far under it) is a 431 and
    never reaches the app (nothing audited)."""
    before = len(env.entries())
    pieces = [b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"]
    pieces += [b"X-Pad-%d: %s\r\n" % (i, b"a" * 1024) for i in range(100)]
    pieces.append(b"\r\n{}")
    assert sum(map(len, pieces)) > MAX_HEAD_BYTES
    answer = _raw_request(env, pieces)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert len(env.entries()) == before


def test_a_body_over_the_limit_is_refused_however_it_is_split(env: Env) -> None:
    """Kills: the body's size counted per part (``size = len(part)``) or not checked at all.

    Rule: a request body over ``MAX_BODY_BYTES`` (8 MiB) is refused 400 naming the limit, and the
    refusal is audited with nothing reserved, whatever the size of the parts it arrives in (the
    ASGI server hands it over in parts far smaller than the limit); even when it is valid JSON."""
    filler = "a" * (MAX_BODY_BYTES + 1024)
    raw = json.dumps({**_body(), "messages": [{"role": "user", "content": filler}]}).encode()
    before_entries = len(env.entries())
    before = env.ledger()
    answer = _post(env, raw, {"Authorization": f"Bearer {env.agent.chain.token}"})
    assert answer.status_code == 400, (answer.status_code, answer.text[:300])
    assert f"over {MAX_BODY_BYTES} bytes" in answer.json()["error"]["message"]
    entries = env.entries()
    assert len(entries) == before_entries + 1 and entries[-1].kind != "allow"
    assert env.ledger() == before


# --- a request refused while an earlier one on its connection is answered -------------------------


def test_a_request_refused_for_a_slow_head_behind_a_running_call_is_never_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills: ``data_received`` still parsing what arrives after a refusal (the ``_refusal`` guard
    dropped).

    Rule: once a pipelined request is refused (here 408: its head was not complete in time)
    while the call before it is still being answered, nothing after it on that connection is
    read: the rest of its head, sent late, is not parsed into a request that would then be
    decided, charged and answered ahead of the refusal. The connection gets the first call's
    answer, the 408, and closes; one call allowed."""
    monkeypatch.setattr(gateway_http, "HEAD_TIMEOUT_S", 0.3)
    first = {"model": PIPE_MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 300}
    with _pipe_env(tmp_path, time_scale=1.0) as env:
        late = env.request({**first, "max_tokens": 5})
        with socket.create_connection(("127.0.0.1", env.server.port), timeout=15) as sock:
            sock.sendall(env.request(first))
            time.sleep(0.05)
            sock.sendall(late[:20])  # the late request's head begins: its clock starts
            time.sleep(0.8)  # past HEAD_TIMEOUT_S, with the first call still generating
            with contextlib.suppress(OSError):
                sock.sendall(late[20:])
            seen = b""
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                while piece := sock.recv(65536):
                    seen += piece
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", seen)  # a JSON answer ends without a line end
        assert statuses == [b"200", b"408"], (statuses, seen[-300:])
        env.wait_outcomes(1, within=5)
        allows = [
            e for e in env.gate.audit.entries() if e.kind == "allow" and e.resource == f"model:{PIPE_MODEL}"
        ]
        assert len(allows) == 1


def test_an_answer_over_the_size_limit_without_a_length_is_refused_while_it_arrives() -> None:
    """Kills: the running count of an answer's body bytes not checked (``_read`` over
    ``MAX_ANSWER_BYTES`` ignored).

    Rule: a chunked answer (no Content-Length to refuse up front) is read no further than
    ``MAX_ANSWER_BYTES``: past it the call is an UpstreamError and the connection closed, never
    an unbounded buffer held whole in the gateway's memory."""
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
            with pytest.raises(UpstreamError, match="larger than"):
                await pool.post(url, b"{}")
            await pool.aclose()

    _run(scenario)


class _NoCompletionCount(Hostile):
    """The hostile backend of review R16, with one more mode: ``json_no_completion``, a JSON
    answer whose ``usage`` has ``prompt_tokens`` and no ``completion_tokens``."""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode != "json_no_completion" or stream:
            return await super()._answer(w, r, stream)
        body = json.loads(_OK_JSON)
        body["usage"] = {"prompt_tokens": 5}
        w.write(_json(json.dumps(body).encode()))
        return True


def test_a_json_answer_without_a_completion_count_is_charged_its_reservation(tmp_path: Path) -> None:
    """Kills: ``_spent`` charging a JSON answer's usage when it has no ``completion_tokens`` (the
    ``completion_tokens is None`` test dropped: the output went out charged as 0 tokens).

    Rule (docs/gateway.md, "What is charged"): a JSON answer whose ``usage`` has no
    ``completion_tokens`` is passed on and charged its whole reservation (prompt estimate plus
    ``max_tokens``), never less than may have been used."""
    backend = _NoCompletionCount()
    try:
        with _r16_gateway(tmp_path, backend) as env:
            backend.mode = "json_no_completion"
            spent = env.spent()
            answer = env.post(_r16_body())
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == "hi"
            (outcome,) = _settled(env, 1)
            assert outcome.status == "ok"
            assert env.spent() == spent + R16_RESERVED
    finally:
        backend.close()


def test_a_streamed_line_over_max_line_is_refused_while_it_arrives() -> None:
    """Kills: ``_lines`` no longer checking the unfinished line against its limit.

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
                async with pool.stream(url, b"{}") as (status, _, lines):
                    assert status == 200
                    async for _ in lines:
                        pass
            await pool.aclose()

    _run(scenario)


class _Recording(Hostile):
    """The hostile backend of review R16 reduced to one that answers every call well (JSON) and
    keeps each chat request's body as the gateway sent it."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        super().__init__()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lengths = [
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ]
                body = await reader.readexactly(lengths[0] if lengths else 0)
                if head.split(b" ")[1] == b"/v1/chat/completions":
                    self.bodies.append(json.loads(body))
                    writer.write(_json(_OK_JSON))
                else:
                    writer.write(_json(b"ok", ctype="text/plain"))
                await writer.drain()
        writer.close()


def test_the_priority_class_is_never_forwarded_to_the_backend(tmp_path: Path) -> None:
    """Kills: the body's ``priority`` left in the payload sent to the backend.

    Rule (docs/gateway.md, "Priority classes"): agentgate's ``priority`` (a class name) is the
    gateway's own routing input, never forwarded: vLLM's own ``priority`` is an integer, and a
    class name there is refused (or misread) by the engine. The rest of the body goes on, with
    ``max_tokens`` set to what was reserved."""
    backend = _Recording()
    try:
        with _r16_gateway(tmp_path, backend) as env:
            sent = {**_r16_body(), "priority": "interactive", "max_completion_tokens": 7}
            sent.pop("max_tokens", None)
            answer = env.post(sent)
            assert answer.status_code == 200, answer.text
            (forwarded,) = backend.bodies
            assert "priority" not in forwarded
            assert forwarded["max_tokens"] == 7  # the output limit reserved and signed
            assert forwarded["messages"] == sent["messages"]
    finally:
        backend.close()


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
