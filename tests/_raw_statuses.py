"""The statuses a loopback server answers to bytes sent in one write, read until it closes the
connection: for the tests of the bounded HTTP protocol (agentgate/_bounded_http.py) that send
what no HTTP client sends (a head over the limit, pipelined or after blank lines, trailer fields)."""

from __future__ import annotations

import re
import socket


def statuses(port: int, data: bytes, timeout: float = 5) -> list[bytes]:
    """The statuses answered to ``data``, sent in one write, until the connection closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        seen = b""
        while piece := sock.recv(65536):
            seen += piece
    return re.findall(rb"HTTP/1\.1 (\d{3}) ", seen)
