"""Review R87b of the bounded HTTP protocol's queue of pipelined requests (agentgate/_bounded_http.py).

Since review R87 reading stops once ``max_queued`` requests are queued behind the one being
answered, but a read was still parsed whole: the queue passed the bound by every request of the
read that reached it (4,738 of 27 bytes from one read, 12 MiB), and a head begun in that read had
its clock (``head_timeout_s``) run while nothing more was read, so a request sent whole behind a
call slower than that clock was answered 408 and its connection closed. What a read holds past the
request that fills the queue is now kept unparsed until the queue shrinks: the queue holds at most
``max_queued`` requests, and the next head's clock starts when its bytes are parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from agentgate._bounded_http import ON_LOST, BoundedHttpToolsProtocol, EmbeddedConfig
from agentgate._http_limits import HttpLimits

GET = b"GET /get HTTP/1.1\r\nHost: x\r\n\r\n"
HELD = b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n"


class _Served:
    """uvicorn with the bounded protocol (``limits`` as given), whose app answers each request
    with its path and its body's size, and holds ``/held`` until ``release``."""

    def __init__(
        self,
        loop: str = "asyncio",
        limits: HttpLimits | None = None,
        protocol: type[BoundedHttpToolsProtocol] | None = None,
    ) -> None:
        """``protocol``, if given, is served instead of the bounded one with ``limits`` (as
        tests/test_http_r91c_queued_refusal_unsent.py's counting one)."""
        self.released = threading.Event()
        self.lost = threading.Event()
        protocol = protocol or BoundedHttpToolsProtocol.with_limits(limits or HttpLimits())
        config = EmbeddedConfig(
            self._app, http=protocol, interface="asgi3", lifespan="off", log_level="critical", loop=loop
        )
        self.server = uvicorn.Server(config)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.listener]}, daemon=True
        )

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        scope[ON_LOST] = self.lost.set
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        while scope["path"] == "/held" and not self.released.is_set():
            await asyncio.sleep(0.01)
        body = b"%s:%d" % (scope["path"].encode(), size)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    @contextlib.contextmanager
    def connected(self) -> Iterator[tuple[socket.socket, BoundedHttpToolsProtocol]]:
        """A raw connection, and the protocol serving it."""
        with socket.create_connection(self.listener.getsockname(), timeout=10) as sock:
            _until(lambda: bool(self.server.server_state.connections))
            (protocol,) = self.server.server_state.connections
            assert isinstance(protocol, BoundedHttpToolsProtocol)
            yield sock, protocol

    def __enter__(self) -> _Served:
        self.thread.start()
        _until(lambda: self.server.started)
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.should_exit = True
        self.thread.join(10)


def _until(done: Any, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not done():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.005)


def _answers(sock: socket.socket, count: int) -> list[tuple[bytes, bytes]]:
    """The status and body of the next ``count`` answers (each body ``path:size``)."""
    seen = b""
    pattern = re.compile(
        rb"HTTP/1.1 (\d+) [^\r]*\r\n(?:[^\r]+\r\n)*?content-length: (\d+)\r\n(?:[^\r]+\r\n)*\r\n"
    )
    while True:
        found: list[tuple[bytes, bytes]] = []
        at = 0
        while (match := pattern.search(seen, at)) and match.end() + int(match[2]) <= len(seen):
            found.append((match[1], seen[match.end() : match.end() + int(match[2])]))
            at = match.end() + int(match[2])
        if len(found) >= count:
            return found
        piece = sock.recv(65536)
        assert piece, f"the connection closed after {found}"
        seen += piece


def _queue_settled(protocol: BoundedHttpToolsProtocol) -> int:
    """The connection's queue once it has reached the bound and a while has passed."""
    _until(lambda: len(protocol.pipeline) >= protocol.max_queued)
    time.sleep(0.2)
    return len(protocol.pipeline)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_one_read_of_many_requests_queues_no_more_than_the_bound(loop: str) -> None:
    """Review R87b: 200 requests in one write behind a held call were all parsed and queued."""
    with _Served(loop) as served, served.connected() as (sock, protocol):
        sock.sendall(HELD + GET * 200)
        assert _queue_settled(protocol) == protocol.max_queued
        assert protocol.flow.read_paused
        served.released.set()  # nothing is lost: each is answered, in order
        assert _answers(sock, 201) == [(b"200", b"/held:0")] + [(b"200", b"/get:0")] * 200


def test_a_chunked_body_then_many_requests_in_one_read_queue_no_more_than_the_bound() -> None:
    """The end of a chunked body (chunk data holding blank lines, an extension, a trailer field)
    is found in the read, so the requests after it are queued one at a time, as after a head."""
    data = b"\r\n\r\n" * 40 + b"0\r\n\r\n" * 20
    chunked = (
        b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'%x;name="a b"\r\n%s\r\n1\r\nz\r\n0\r\nX-Trailer: 1\r\n\r\n' % (len(data), data)
    )
    sized = b"POST /sized HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n\r\n\r\nGET /"
    with _Served() as served, served.connected() as (sock, protocol):
        sock.sendall(HELD + chunked + sized + GET * 100)
        assert _queue_settled(protocol) == protocol.max_queued
        served.released.set()
        assert (
            _answers(sock, 103)
            == [
                (b"200", b"/held:0"),
                (b"200", b"/chunked:%d" % (len(data) + 1)),
                (b"200", b"/sized:9"),
            ]
            + [(b"200", b"/get:0")] * 100
        )


def test_a_head_sent_whole_behind_a_full_queue_is_not_timed_out_while_it_waits() -> None:
    """Review R87b: the head begun in the read that filled the queue had its clock run while
    reading was paused; with the call before it slower than that clock, it was answered 408 and
    the connection closed, though its caller had sent all of it at once."""
    with _Served(limits=HttpLimits(head_timeout_s=0.3)) as served, served.connected() as (sock, protocol):
        nine = HELD + GET * protocol.max_queued
        sock.sendall(nine + GET[:10])  # the tenth head's first bytes, in the read that fills the queue
        _until(lambda: len(protocol.pipeline) == protocol.max_queued)
        sock.sendall(GET[10:])
        time.sleep(1.0)  # past the head clock, while the held call keeps the queue full
        served.released.set()
        answers = _answers(sock, 2 + protocol.max_queued)
        assert [status for status, _ in answers] == [b"200"] * (2 + protocol.max_queued)


def test_below_the_bound_a_queued_request_with_its_body_leaves_a_callers_close_seen() -> None:
    """Below the bound a read is parsed whole, as before: a request queued behind the running
    call with all its body in the read does not stop reading, so the caller's close is seen
    while the call runs."""
    with _Served() as served, served.connected() as (sock, protocol):
        sock.sendall(HELD)
        _until(lambda: protocol.cycle is not None)
        sock.sendall(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
        _until(lambda: len(protocol.pipeline) == 1)
        sock.shutdown(socket.SHUT_RDWR)
        assert served.lost.wait(5), "the caller's close was not seen while its call ran"


def test_a_head_in_the_read_that_ended_the_request_before_it_is_counted_byte_for_byte() -> None:
    """A read is parsed a request at a time, so such a head is counted as any other: until review
    R87b it was counted by what the parser keeps of it (no whitespace before a value), and a
    head of 2,728 bytes passed a limit of 2,048."""
    padded = b"".join(b"a:%s1\r\n" % (b" " * 40) for _ in range(60))
    big = b"GET /big HTTP/1.1\r\nHost: x\r\n%s\r\n" % padded
    assert len(big) > 2048 and len(padded.replace(b" ", b"")) < 2048
    with _Served(limits=HttpLimits(max_head_bytes=2048)) as served, served.connected() as (sock, _):
        sock.sendall(GET + big)
        assert [status for status, _ in _answers(sock, 2)] == [b"200", b"431"]
