"""The gateway's HTTP/1.1 protocol: uvicorn's httptools protocol with bounds on the request head.

uvicorn's httptools protocol (the fast one, chosen when httptools is installed) reads a request
head of any size and for any time: one header line of 50 MB was buffered whole, and a client
that sends its head a byte at a time (or nothing at all) held its connection open for ever.
``BoundedHttpToolsProtocol`` answers 431 and closes once a head passes ``MAX_HEAD_BYTES``, and
408 and closes when a head is not complete ``HEAD_TIMEOUT_S`` after the connection opened or
after the head's first byte arrived (an idle kept-alive connection stays under uvicorn's own
keep-alive timeout).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
"""The most bytes of one request's line and headers (a chain token is at most 32 KiB)."""
HEAD_TIMEOUT_S = 10.0
"""Seconds a client has to send a whole request head."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses request heads over ``MAX_HEAD_BYTES`` (431) or slower
    than ``HEAD_TIMEOUT_S`` (408); the connection is closed after either answer."""

    _head_bytes = 0
    _reading_head = True
    _tail = b""
    """The last bytes of the head read so far (an end of head may span two reads)."""
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._reading_head:
            # Counted before the parser buffers anything: the part of this read up to the end of
            # the head. (A read that ends one request and begins the next head gives that head's
            # first bytes to the parser uncounted: at most one read's worth.)
            if self._head_timer is None:
                self._start_head_timer()
            seen = self._tail + data
            end = _head_end(seen)
            self._head_bytes += len(data) if end < 0 else end - len(self._tail)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, "Request Header Fields Too Large")
                return
            self._tail = seen[-2:]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._head_bytes = 0
        self._tail = b""
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head = True
        self._head_bytes = 0
        self._tail = b""

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _start_head_timer(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._reading_head and not self.transport.is_closing():
            self._refuse(408, "Request Timeout")

    def _refuse(self, status: int, reason: str) -> None:
        self._stop_head_timer()
        body = reason.encode("ascii")
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, body, len(body), body)
        )
        self.transport.close()


def _head_end(data: bytes) -> int:
    """The offset just past the blank line that ends a request head in ``data`` (CRLF or bare LF
    line ends), or -1."""
    ends = [at + len(mark) for mark in (b"\n\r\n", b"\n\n") if (at := data.find(mark)) >= 0]
    return min(ends, default=-1)
