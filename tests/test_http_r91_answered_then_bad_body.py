"""Review R91 of the bounded HTTP protocol (agentgate/_bounded_http.py): a request answered
before its body has all arrived (an app that answers without reading it, or refuses it as too
large) has the rest of its body read and dropped; when the parser then refuses that rest (a chunk
size that is not one), the connection closes with no second answer.

The protocol wrote its 400 after the app's answer: two answers to one request, the second read by
a keep-alive client as the answer to its next one (a framing desync). The same spot with a framing
too large was already closed without a 431. The simulator serves the same protocol as the gateway.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from agentgate.sim import SimServer

HEAD = b"POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(time_scale=1e-3) as sim:
        yield sim


def _answer(sock: socket.socket) -> bytes:
    """One whole answer with a ``Content-Length`` body, read from ``sock``."""
    seen = b""
    while b"\r\n\r\n" not in seen:
        seen += sock.recv(65536)
    head, _, body = seen.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    assert length is not None
    while len(body) < int(length.group(1)):
        body += sock.recv(65536)
    return head


@pytest.mark.parametrize("rest", [b"zz\r\n", b"2 \r\nab\r\n0\r\n\r\n", b"0\r\nX-T: t\n\r\n"])
def test_a_malformed_rest_of_an_answered_body_closes_with_no_second_answer(
    server: SimServer, rest: bytes
) -> None:
    """Review R91: the 404 was followed by a 400 for the same request."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(HEAD + b"2\r\nab\r\n")
        assert _answer(sock).startswith(b"HTTP/1.1 404 ")  # answered, its body not all here
        sock.sendall(rest)
        after = b""
        while piece := sock.recv(65536):  # until the server closes the connection
            after += piece
    assert after == b""
