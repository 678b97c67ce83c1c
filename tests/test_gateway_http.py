"""The gateway's HTTP/1.1 server layer (agentgate/_bounded_http.py): ``MAX_HEAD_BYTES``
bounds a request head however many reads it arrives in (431), once a pipelined request is
refused nothing after it on that connection is read or served, and the rest of a body refused
before it all arrived is bounded in time (``unread_body_s``), and a chunked body's trailer fields
in size.

Real loopback sockets written by hand, against the gateway tests' ``env`` fixture and the pipelining
gateway of ``test_gateway_shutdown_pipelining``."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from pathlib import Path

import pytest
from test_gateway import Env
from test_gateway_shutdown_pipelining import MODEL as PIPE_MODEL
from test_gateway_shutdown_pipelining import _env as _pipe_env

from agentgate._http_limits import MAX_HEAD_BYTES

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


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
    first = {"model": PIPE_MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 300}
    with _pipe_env(tmp_path, time_scale=1.0) as env:
        # The server's protocol class (``GatewayServer(head_timeout_s=...)`` sets it on its own).
        monkeypatch.setattr(env.server.server.config.http, "head_timeout_s", 0.3)
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


def test_a_body_trickled_on_after_its_refusal_does_not_hold_the_connection(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills: the rest of a refused body read (and dropped) for as long as it trickles in.

    Rule: a request answered before its body had all arrived (here refused 400 for a
    ``Content-Encoding`` the gateway does not read, before any of its body is) has
    ``unread_body_s`` more for the rest of it; then the connection is closed. It stayed open for
    as long as the caller sent a byte now and then (uvicorn's keep-alive clock restarts on any
    data), so a trickled body, bounded before its refusal, held its connection for ever after it.
    (Until review R54 this refusal was the 400 for a body slower than ``BODY_TIMEOUT_S``, which is
    now a 408 that closes the connection at once: the next test.)"""
    monkeypatch.setattr(env.server.server.config.http, "unread_body_s", 0.5)  # the server's protocol
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=0.05) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: 1000000\r\n\r\n{"
        )
        received = b""
        closed = False
        deadline = time.monotonic() + 15  # far past both limits
        while not closed and time.monotonic() < deadline:
            try:
                sock.sendall(b" ")  # a byte every 0.1 s, on and on
                while piece := sock.recv(65536):
                    received += piece
                closed = True
            except TimeoutError:
                time.sleep(0.05)
            except OSError:
                closed = True
    assert received.startswith(b"HTTP/1.1 400 ") and b"is not supported" in received, received[:300]
    assert closed, "the connection was still open 15 s after the refusal"


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_its_connection_closed(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R54: a body slower than ``BODY_TIMEOUT_S`` was answered 400, which no client retries.

    Rule: a request whose body has not all arrived ``BODY_TIMEOUT_S`` after its head is answered
    408 ``request_timeout`` with ``Connection: close``, and the connection is closed with the
    answer (RFC 9110, 15.5.9; as nginx's ``client_body_timeout``): the request was not malformed,
    and a client may send it again on a new connection (the OpenAI SDKs retry a 408, never a
    400). It was a 400 ``invalid_request``, and the connection was held ``unread_body_s`` more
    for the rest of the body (here far longer than the socket's wait)."""
    monkeypatch.setattr(env.server.gateway, "body_timeout_s", 0.3)
    monkeypatch.setattr(env.server.server.config.http, "unread_body_s", 60.0)
    before = len(env.entries())
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        received, closed = b"", False
        with contextlib.suppress(TimeoutError):
            while piece := sock.recv(65536):
                received += piece
            closed = True
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received[:300]
    assert re.search(rb"(?im)^connection: close\r?$", head), head
    assert b'"code":"request_timeout"' in body and b"did not arrive within" in body, body
    assert closed, "the connection was left open after the 408"
    entries = env.entries()[before:]
    assert [e.kind for e in entries] == ["deny"], entries


def _chunked_head(extra: str = "") -> bytes:
    return (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Transfer-Encoding: chunked\r\n{extra}\r\n"
    ).encode()


def test_trailer_fields_past_64_kib_are_refused_not_buffered(env: Env) -> None:
    """Kills: trailer fields (after a chunked body's last chunk) read without a bound.

    Rule: the fields after a chunked body count as a head does, against ``MAX_HEAD_BYTES``; past
    it the request is refused 431 and the connection closed, nothing decided. They were added
    to the request's headers, without any bound: 400 MB of them grew the gateway by 460 MB in
    under 2 s, from a caller with no credentials."""
    before = len(env.entries())
    trailers = (b"X-Pad: " + b"a" * 1000 + b"\r\n") * 1024  # 1 MiB of trailer fields
    answer = _raw_request(env, [_chunked_head(), b"2\r\n{}\r\n0\r\n", trailers, b"\r\n"])
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:300]
    assert len(env.entries()) == before


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: {n}\r\nContent-Length: {m}",
        "Content-Length: {n}\r\nContent-Length: {n}",
        "Content-Length: {n}, {n}",
        "Content-Length: {n}\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
    ],
    ids=["two_lengths", "one_length_twice", "length_list", "length_and_chunked", "chunked_twice"],
)
def test_a_body_framed_twice_over_is_refused_by_the_parser_before_the_app(env: Env, framing: str) -> None:
    """Pins down what held (review R53, duplicated headers): a request whose body length is
    stated more than once (two ``Content-Length`` headers, equal or not, or a list of them; a
    ``Content-Length`` beside ``Transfer-Encoding: chunked``; ``chunked`` twice), the ground of
    request smuggling between a proxy and the gateway, is a bare 400 from the HTTP parser
    (httptools) and closes the connection: no framing is picked by order, nothing reaches the
    app, nothing is decided or audited."""
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    head = framing.format(n=len(body), m=len(body) + 5).encode()
    payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if b"chunked" in head else body
    before = len(env.entries())
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n\r\n" + payload
    answer = _raw_request(env, [request])
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert len(env.entries()) == before


_CHAT_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(
    "coding",
    [
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: deflate,chunked",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked",
    ],
    ids=["gzip_chunked", "deflate_chunked", "gzip_then_chunked_header"],
)
def test_a_transfer_coding_other_than_chunked_is_answered_501_and_the_connection_closed(
    env: Env, coding: str
) -> None:
    """Review R55: a body sent with ``Transfer-Encoding: gzip, chunked`` was de-chunked and its
    gzip coding ignored, so the app read the coded bytes as the body itself.

    Rule: a request whose ``Transfer-Encoding`` names any coding but ``chunked`` (the one the
    gateway decodes) is answered a bare 501 (RFC 9112, 6.1: a coding the server does not
    understand) and the connection closed: nothing reaches the app, nothing is decided or
    audited, and the request sent after it on the connection is never served."""
    before = len(env.entries())
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + coding.encode()
        + b"\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(_CHAT_BODY), _CHAT_BODY)
    )
    answer = _raw_request(env, [request + _HEALTHZ])
    assert answer.startswith(b"HTTP/1.1 501 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"501"], answer
    assert len(env.entries()) == before


@pytest.mark.parametrize(
    "head",
    [
        "GET /healthz HTTP/1.1",
        "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b",
        "GET /healthz HTTP/1.1\r\nHost: a, b",
        "GET /healthz HTTP/1.1\r\nHost: a b",
        "GET /healthz HTTP/1.0\r\nHost: a\r\nHost: a",
    ],
    ids=["none", "two", "list", "space", "two_in_1_0"],
)
def test_a_request_without_one_valid_host_is_answered_400_and_the_connection_closed(
    env: Env, head: str
) -> None:
    """Review R55: an HTTP/1.1 request with no ``Host`` header, or with two, or with a list of
    hosts, was served (a proxy before the gateway may read another host than it does).

    Rule (RFC 9112, 3.2): an HTTP/1.1 request without a ``Host`` header, and any request with
    more than one or with a value that is not a host (and port), is answered a bare 400 and the
    connection closed; the request after it is never served."""
    answer = _raw_request(env, [head.encode() + b"\r\n\r\n" + _HEALTHZ])
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"400"], answer
    assert b"connection: close" in answer.lower() and b"Host" in answer


@pytest.mark.parametrize(
    "head",
    [
        "GET /healthz HTTP/1.0",
        "GET /healthz HTTP/1.1\r\nHost: gateway.example:8000",
        "GET /healthz HTTP/1.1\r\nHost: [::1]:8000",
        "GET /healthz HTTP/1.1\r\nHost: ",
        "GET http://gateway.example/healthz HTTP/1.1\r\nHost: other.example",
    ],
    ids=["1_0_without_host", "name_and_port", "ipv6", "empty", "absolute_form"],
)
def test_a_request_with_one_host_or_an_http_1_0_one_without_is_served(env: Env, head: str) -> None:
    """Pins down what holds beside the rule above: an HTTP/1.0 request needs no ``Host``; a host
    name or an IP literal, with or without a port, and an empty value are hosts; a request
    target of absolute form (which RFC 9112, 3.2.2 says overrides ``Host``) is served by its
    path alone."""
    answer = _raw_request(env, [head.encode() + b"\r\nConnection: close\r\n\r\n"])
    assert answer.startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 ")), answer[:200]
    assert answer.endswith(b'{"status":"ok"}'), answer


@pytest.mark.parametrize("line", ["GET /healthz HTTP/2.0", "GET /healthz"], ids=["2_0", "0_9"])
def test_a_request_of_another_http_version_is_answered_505(env: Env, line: str) -> None:
    """Review R55: a request line of ``HTTP/2.0`` (or of none, HTTP/0.9) was served as
    HTTP/1.1.

    Rule: only HTTP/1.0 and HTTP/1.1 requests are served; any other version is answered a bare
    505 and the connection closed (RFC 9110, 15.6.6)."""
    answer = _raw_request(env, [line.encode() + b"\r\nHost: x\r\n\r\n" + _HEALTHZ])
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answer) == [b"505"], answer


def test_a_head_refused_behind_a_running_call_is_answered_after_it(tmp_path: Path) -> None:
    """Review R55: the refusals of ``_refused_head`` (here 505) take the way of the parser's own
    400: pipelined behind a call still being answered, the refusal is written after that call's
    answer, never ahead of it or into it, and nothing after it is read."""
    first = {"model": PIPE_MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 20}
    with _pipe_env(tmp_path, time_scale=1.0) as env:
        with socket.create_connection(("127.0.0.1", env.server.port), timeout=15) as sock:
            sock.sendall(env.request(first))
            time.sleep(0.05)
            sock.sendall(b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n" + _HEALTHZ)
            seen = b""
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                while piece := sock.recv(65536):
                    seen += piece
        assert re.findall(rb"HTTP/1\.1 (\d{3}) ", seen) == [b"200", b"505"], seen[-300:]
