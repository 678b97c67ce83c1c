"""Review R91 of the bounded HTTP protocol's refusal of a pipelined request's body
(agentgate/_bounded_http.py): a request queued behind one still being answered, whose body the
parser then refuses (a chunk size that is not one, a bare LF in its trailer) or whose trailer
fields pass the bound (431), is refused after the answers before it, and the connection closes.

Its refusal was only stored: uvicorn started the refused request once the one before it was
answered, and its app waited for a body that would never come, as nothing more was read. An app
that waits without a limit held the connection until the caller left, with no refusal written;
the simulator (and the gateway) answered 408 "the body did not arrive" after its body timeout, and
a path answered without reading the body had two answers (its app's, then the 400). The refused
request is now never started. The simulator serves the same protocol as the gateway.
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
CHAT = b"/v1/chat/completions"


def call(path: bytes) -> bytes:
    """A well-formed call to ``path``, its connection kept alive."""
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % (path, len(BODY)) + BODY


def chunked(path: bytes, body: bytes) -> bytes:
    """A call to ``path`` with the chunked ``body`` as sent (its framing included)."""
    return b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%s" % (path, body)


MALFORMED = {
    "size not hex": b"zz\r\nab\r\n0\r\n\r\n",
    "white space after the size": b"2 \r\nab\r\n0\r\n\r\n",
    "bare LF in the trailer": b"2\r\nab\r\n0\r\nX-T: t\n\r\n",
}


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    # A body timeout short enough that the old 408 came within the test, long enough to be seen.
    with SimServer(time_scale=1e-3, max_head_bytes=LIMIT, body_timeout_s=1.0) as sim:
        yield sim


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_body_alone_is_400(server: SimServer, body: bytes) -> None:
    """The baseline: sent alone, the request is refused 400 at once."""
    assert statuses(server.port, chunked(CHAT, body)) == [b"400"]


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_body_behind_a_call_is_400_after_its_answer(server: SimServer, body: bytes) -> None:
    """Review R91: the call before it was answered 200, then the refused one 408 after the body
    timeout (its body had arrived, malformed), with no 400."""
    served = server.served
    assert statuses(server.port, call(CHAT) + chunked(CHAT, body)) == [b"200", b"400"]
    assert server.served == served + 1  # the refused request was never generated for


def test_a_refused_request_behind_a_call_has_one_answer(server: SimServer) -> None:
    """Review R91: to a path answered without reading the body, two requests had three answers
    (404, 404 and 400): the refused request's app ran and answered before its refusal."""
    assert statuses(server.port, call(b"/nowhere") + chunked(b"/nowhere", MALFORMED["size not hex"])) == [
        b"404",
        b"400",
    ]


def test_trailer_fields_over_the_bound_behind_a_call_are_431(server: SimServer) -> None:
    """Review R91: the trailer past the bound of a queued request was 408 after the body timeout."""
    trailer = b"X-T: " + b"t" * (4 * LIMIT) + b"\r\n"
    assert statuses(server.port, call(CHAT) + chunked(CHAT, b"2\r\nab\r\n0\r\n" + trailer + b"\r\n")) == [
        b"200",
        b"431",
    ]
