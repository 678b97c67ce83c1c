"""At shutdown, a connection whose request head is partly in, with no answer before it running,
is answered 503 ``shutting_down`` with ``connection: close`` (review R96, docs/gateway.md).

uvicorn closes every connection with no request running as the stop begins. Until review R96 a
caller that had sent part of its head then got EOF and no status: it could not tell the stop from
a crash, and a POST is not safe to send again after one. Nothing of it is decided or audited.
An idle kept-alive connection (nothing of a next request read) is still closed with no answer,
as HTTP lets a server close one.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from test_gateway import Env

from agentgate.dispatch.gateway import Gateway, GatewayServer

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

_HALF_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-"
_HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def _read_to_eof(connection: socket.socket) -> bytes:
    connection.settimeout(10)
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
    return data


def _healthz(connection: socket.socket) -> None:
    """Ask for ``/healthz`` on ``connection`` and read its whole answer (the connection kept alive)."""
    connection.sendall(_HEALTH)
    connection.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))[15:]
    )
    while len(body) < length:
        body += connection.recv(65536)
    assert head.startswith(b"HTTP/1.1 200") and len(body) == length, data + body


def _head_bytes_read(server: GatewayServer, at_least: int) -> None:
    """Return once the server's protocol has read ``at_least`` bytes of a head on one connection."""
    deadline = time.monotonic() + 5
    while not any(getattr(c, "_head_bytes", 0) >= at_least for c in server.server.server_state.connections):
        assert time.monotonic() < deadline, "the server never read the head's first bytes"
        time.sleep(0.005)


@pytest.mark.parametrize("after_an_answer", [False, True], ids=["first-request", "kept-alive"])
def test_a_head_partly_in_when_the_stop_begins_is_answered_503_shutting_down(
    env: Env, after_an_answer: bool
) -> None:
    server = GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=1)
    server.start()
    before = len(env.entries())
    connection = socket.create_connection((server.host, server.port))
    stopper = threading.Thread(target=server.stop)
    try:
        if after_an_answer:
            _healthz(connection)
        connection.sendall(_HALF_HEAD)
        _head_bytes_read(server, len(_HALF_HEAD))
        stopper.start()
        answer = _read_to_eof(connection)
    finally:
        connection.close()
        if stopper.ident is None:
            server.stop()
        stopper.join(15)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer  # before R96: b"", no answer at all
    assert b"connection: close" in head.lower(), head
    assert json.loads(body)["error"]["code"] == "shutting_down", body
    assert len(env.entries()) == before  # nothing decided or audited


@pytest.mark.parametrize("blank_line", [False, True], ids=["nothing-more", "a-blank-line-after"])
def test_an_idle_kept_alive_connection_is_closed_with_no_answer(env: Env, blank_line: bool) -> None:
    """Blank lines before a request line begin no request (RFC 9112 section 2.2): a connection
    that sent one after its answer is idle too, closed with no answer."""
    server = GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=1)
    server.start()
    connection = socket.create_connection((server.host, server.port))
    try:
        _healthz(connection)
        if blank_line:
            connection.sendall(b"\r\n")
            _head_bytes_read(server, 2)
    finally:
        server.stop()
    try:
        assert _read_to_eof(connection) == b""
    finally:
        connection.close()
