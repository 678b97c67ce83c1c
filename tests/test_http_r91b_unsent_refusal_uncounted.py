"""Review R91b of the bounded HTTP protocol (agentgate/_bounded_http.py): a request answered
before its body has all arrived (here refused 400 for a ``Content-Encoding`` the gateway does not
read, before any of its body is) has the rest of its body read and dropped; when the parser then
refuses that rest (a chunk size that is not one, trailer fields or chunk framing past
``max_head_bytes``), no second answer is written (review R91).

That refusal was still made, and the gateway counts each protocol refusal it makes in
``agentgate_gateway_errors_total``: a 400 or a 431 that no caller ever got was counted beside the
answer it did get. docs/gateway.md says the counter counts every error answer; it now counts the
answers sent, and only them.

A real gateway on loopback, against the gateway tests' ``env`` fixture."""

from __future__ import annotations

import contextlib
import socket

import pytest
from test_gateway import Env

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def _errors_counted(env: Env) -> dict[tuple[str, str], float]:
    """``agentgate_gateway_errors_total`` of the gateway, by (status, code)."""
    return {
        (sample.labels["status"], sample.labels["code"]): sample.value
        for family in env.server.gateway.registry.collect()
        if family.name == "agentgate_gateway_errors"
        for sample in family.samples
        if sample.name == "agentgate_gateway_errors_total"
    }


@pytest.mark.parametrize(
    "rest",
    [
        b"zz\r\n",  # a chunk size that is not one: 400
        b"0\r\nX-T: " + b"t" * 70_000 + b"\r\n\r\n",  # trailer fields past 64 KiB: 431
        b"1;" + b"e" * 70_000 + b"\r\n",  # a chunk's framing past 64 KiB: 431
    ],
    ids=["malformed", "trailer_too_large", "framing_too_large"],
)
def test_the_refusal_of_an_answered_requests_rest_is_neither_sent_nor_counted(env: Env, rest: bytes) -> None:
    before = _errors_counted(env)
    with socket.create_connection(("127.0.0.1", env.server.port), timeout=10) as sock:
        sock.sendall(HEAD + b"2\r\n{}\r\n")
        received = b""
        while b"is not supported" not in received:  # the one answer, before its body was read
            piece = sock.recv(65536)
            assert piece, received
            received += piece
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed as it arrived
            sock.sendall(rest)
        with contextlib.suppress(ConnectionResetError):
            while piece := sock.recv(65536):  # until the server closes the connection
                received += piece
    assert received.count(b"HTTP/1.1 ") == 1 and received.startswith(b"HTTP/1.1 400 "), received[:300]
    after = _errors_counted(env)
    counted = {labels: after[labels] - before.get(labels, 0.0) for labels in after}
    assert {labels: n for labels, n in counted.items() if n} == {("400", "invalid_request"): 1.0}
