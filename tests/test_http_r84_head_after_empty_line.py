"""Review R84 of the bounded HTTP protocol's head limit (agentgate/_bounded_http.py): a head the
count before the parser did not see.

The protocol counts each read up to the end of the head before the parser buffers it, and answers
431 past ``max_head_bytes``. The parser skips empty lines before a request line (RFC 9112, 2.2),
but the search for the head's end did not: the blank line before the request line was taken for
the end, and the head after it, in the same read, went to the parser uncounted and was served
(a 150 kB head under the gateway's 64 KiB limit: 200). A head pipelined in the read that ended
the request before it was never counted either. Both are 431 now; the simulator serves the same
protocol, with a limit of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _raw_statuses import statuses

from agentgate.sim import SimServer

LIMIT = 1024
"""The simulator's head limit here (the least there is)."""
GET = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
LARGE = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + b"a" * (3 * LIMIT) + b"\r\n\r\n"
"""A head three times over the limit (the connection closed after its answer, whatever it is)."""


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(time_scale=1e-3, max_head_bytes=LIMIT) as sim:
        yield sim


@pytest.mark.parametrize(
    "empty", [b"\r\n", b"\r\n\r\n", b"\n\n", b"\r\n" * 50], ids=["CRLF", "CRLF-CRLF", "LF-LF", "50-CRLF"]
)
def test_a_head_over_the_limit_after_empty_lines_is_431(server: SimServer, empty: bytes) -> None:
    """Review R84: after ``\\r\\n\\r\\n`` the 3 KiB head was served (200) under a 1 KiB limit."""
    assert statuses(server.port, empty + LARGE) == [b"431"]


def test_a_head_over_the_limit_pipelined_in_one_read_is_431(server: SimServer) -> None:
    """Review R84: a head over the limit sent in one write with the request before it was
    served (200, 200); that request is answered, then the 431."""
    assert statuses(server.port, GET + LARGE) == [b"200", b"431"]


def test_empty_lines_before_a_head_within_the_limit_are_skipped(server: SimServer) -> None:
    """The empty lines before a request line, and between requests, are skipped, as the parser
    skips them: each request is served."""
    close = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert statuses(server.port, b"\r\n\r\n" + GET + b"\r\n" + close) == [b"200", b"200"]
