"""Review R84 of the bounded HTTP protocol's bound on a chunked body's trailer fields
(agentgate/_bounded_http.py): they and the chunks' framing may be at most ``max_head_bytes`` more
than the body itself, else 431.

The bound was checked after each read that left the body unfinished, and only then: trailer fields
that came in the read that ended the body (a whole request in one write, as most clients send a
small one) were never counted, and 150 kB of them under the gateway's 64 KiB limit were buffered
and served (200), where the same bytes spread over later reads were a 431. The simulator serves
the same protocol, with a limit of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from _raw_statuses import statuses

from agentgate.sim import SimServer

LIMIT = 1024
"""The simulator's head limit here (the least there is)."""
BODY = json.dumps(
    {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
).encode()
HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)
CHUNK = b"%x\r\n%s\r\n" % (len(BODY), BODY)


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(time_scale=1e-3, max_head_bytes=LIMIT) as sim:
        yield sim


@pytest.mark.parametrize("fields", [1, 40])
def test_trailer_fields_over_the_bound_in_the_last_read_are_431(server: SimServer, fields: int) -> None:
    """Review R84: 4 KiB of trailer fields (one field or many), sent in one write with the head
    and the body, were served (200) under a 1 KiB limit plus a body of about 100 bytes."""
    size = 4 * LIMIT // fields
    trailer = b"".join(b"X-T%d: %s\r\n" % (i, b"t" * size) for i in range(fields))
    served = server.served
    assert statuses(server.port, HEAD + CHUNK + b"0\r\n" + trailer + b"\r\n") == [b"431"]
    assert server.served == served  # the app was told its caller left: nothing generated


def test_trailer_fields_within_the_bound_are_dropped_and_the_call_served(server: SimServer) -> None:
    """A trailer well within the bound, in the same read, is dropped and the call served."""
    assert statuses(server.port, HEAD + CHUNK + b"0\r\nX-T: " + b"t" * (LIMIT // 2) + b"\r\n\r\n") == [b"200"]
