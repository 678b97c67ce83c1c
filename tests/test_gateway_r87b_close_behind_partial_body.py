"""Review R87b of docs/gateway.md, "Pipelined requests": below the queue's bound a caller's close
is seen while its call runs, except behind a request queued with only part of its body.

The page said the close was seen below the bound, without that exception: uvicorn stops reading
at the head of a request it queues, and the gateway resumes reading only at the end of that
request's body, so a POST queued behind the running call with its body still arriving keeps the
rest of its body, and the caller's close, unread until the call ends. These tests hold the page
to both halves of what it now says.
"""

from __future__ import annotations

import socket

from test_gateway_r87b_pipeline_held import GET, HELD, _Served, _until


def _pipelined_then_closed(served: _Served, behind: bytes) -> bool:
    """Whether the caller's close, after ``behind`` queued behind a held call, is seen while
    the call runs (its app's ``ON_LOST`` hook called within a second); the connection closes
    once the call ends either way."""
    with served.connected() as (sock, protocol):
        sock.sendall(HELD)
        _until(lambda: protocol.cycle is not None)
        sock.sendall(behind)
        _until(lambda: len(protocol.pipeline) == 1)
        sock.shutdown(socket.SHUT_RDWR)
        seen = served.lost.wait(1.0)
        served.released.set()
        _until(protocol.transport.is_closing)
        return seen


def test_a_callers_close_behind_a_queued_get_is_seen_while_its_call_runs() -> None:
    with _Served() as served:
        assert _pipelined_then_closed(served, GET)


def test_a_callers_close_behind_a_queued_post_with_part_of_its_body_waits_for_the_call() -> None:
    partial = b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"
    with _Served() as served:
        assert not _pipelined_then_closed(served, partial)
