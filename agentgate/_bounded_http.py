"""The bounded HTTP/1.1 protocol that the gateway and the simulator serve: uvicorn's httptools
protocol with bounds on the request head, on a refused body's rest and on a caller that stops reading.

Shared by design: the gateway (``agentgate/dispatch/gateway/_server.py``) and the simulator
(``agentgate/sim/_server.py``) each serve it with their own ``HttpLimits``
(``agentgate/_http_limits.py``), through ``BoundedHttpToolsProtocol.with_limits``; the scope keys
below are what the gateway's app reads.

uvicorn's httptools protocol (the fast one, chosen when httptools is installed) reads a request
head of any size and for any time: one header line of 50 MB was buffered whole, and a client
that sends its head a byte at a time (or nothing at all) held its connection open for ever.
``BoundedHttpToolsProtocol`` answers 431 and closes once a head passes ``max_head_bytes`` (the
empty lines the parser skips before a request line count as the head's bytes; a read is parsed a
request at a time, ``_parse_held``, so a head pipelined in the read that ended the request before
it is counted byte for byte too: until review R87b it was counted, in that read, by what the
parser keeps of it, which approximates its size from below, ``_count_head``), and
408 and closes when a head is not complete ``head_timeout_s`` after the connection opened or
after the head's first byte arrived, in a read of its own or in the read that ended the request
before it, or for a head held behind a full queue (``_parse_held``) once it is parsed (an idle
kept-alive connection stays under uvicorn's own keep-alive timeout, which does not run while a
head is arriving: until review R84 a head begun in the read that ended the
request before it had no clock, and the keep-alive closed its connection with no answer). A request answered before its body has all arrived (the app refused it: a
body too large, an encoding not supported) has ``unread_body_s`` for the rest of it, dropped as it
comes, before the connection is closed. A chunked body's trailer fields are dropped (uvicorn
added them to the request's headers, with no bound: hundreds of MB of them were buffered); they
and the chunks' framing may be at most ``max_head_bytes`` more than the body itself, else 431.
The framing is counted read by read while the body is still being read; the trailer fields also as
the parser hands them over, whatever read they came in (until review R84 a trailer that came in the
read that ended the body was not counted). Chunk framing that comes in the read with the head,
or in the one that ends the body, is not counted: the parser buffers none of it (it skips chunk
extensions), and each is one read at most.

It also bounds the answer's side: a caller that stops reading (its socket open, its receive
window shut) made uvicorn wait for the socket to drain with no limit, so a stalled stream held
its connection, its backend request and its budget reservation for ever. Once the answer has
filled the socket's buffers (the transport paused writing, as nginx's ``send_timeout`` starts
when a write would block) and the caller then takes none of the bytes written for ``stall_s``
seconds, the connection is aborted and the request's scope marked (``STALLED``); the app sees the
caller gone and settles the call (docs/gateway.md). A caller that reads, however slowly, is not
cut: each ``stall_s`` in which it took any bytes starts the clock again. The same clock runs on
an answer that ended with bytes still in the transport's buffer (below the high-water mark, so
writing never paused): closing the connection would wait for them for ever too.

Pipelined requests (several on one kept-alive connection, sent before the first is answered) are
queued by uvicorn, which points its ``cycle`` at the newest one. The marks above (``STALLED``,
``LOST`` and the ``ON_LOST`` hook) go to the request whose answer is being written (the one
running), not to one still queued behind it; a lost connection marks every unfinished request.
The queue is bounded (``max_queued``, ``_QueueFlow``): with that many queued, reading stops until
one is started (until review R87 reading resumed after every request, and a caller that read no
answer had every request it wrote queued), and what the read held past the request that filled
the queue waits unparsed (``_parse_held``; until review R87b it was parsed and queued too).
A request refused by the protocol (a head the parser rejects: 400; one without a single valid
``Host``: 400; of another HTTP version: 505; with a transfer coding but ``chunked``: 501,
``_refused_head``; too large: 431; too slow: 408)
behind requests still being answered is refused after their answers, never written ahead of or
into them; nothing after it is read, and the connection closes with the refusal. So is one whose
body the parser refuses (a chunked framing that is not right: 400; trailer fields too large: 431)
while it is queued: it is never started (until review R91 uvicorn started it after them, and its
app waited for a body that would not come: no refusal, or a late 408 of the app's). A request
answered before its body ended, the rest of which the parser refuses (or whose framing passes the
bound), gets no second answer: the connection closes after the first (until review R91 a 400 came
after it). A refusal's body
is ``refusal_body``'s: plain text here (the simulator's, as uvicorn's own), OpenAI's error shape
at the gateway (``agentgate/dispatch/gateway/_server.py``).
``UNSENT`` lets an app ask how many bytes of its connection still wait in the gateway's own
buffer (at shutdown it waits for them to leave before the process exits).

A request that asks to upgrade the connection (``Connection: upgrade`` with ``Upgrade``, as
``curl --http2`` sends ``Upgrade: h2c`` on plain http) is answered as a plain HTTP/1.1 request, as
HTTP allows a server to do: httptools stops reading at the end of such a head, so uvicorn handed
the app an empty body (a signed call was refused as "not JSON"); its head is parsed again without
the upgrade, and its body read as any other. ``CONNECT`` is refused (400).

An answer of unknown length (a stream) to an HTTP/1.0 request is delimited by closing the
connection: uvicorn framed it ``Transfer-Encoding: chunked``, which an HTTP/1.0 client does not
know (RFC 9112, section 6.1: it must not be sent to one), so the chunk sizes were read as part of
the events. uvicorn never keeps an HTTP/1.0 connection alive, so its answer ends with the close.

Both servers are embedded in an application's process, whose logging is the application's:
``EmbeddedConfig`` is uvicorn's configuration less its logging set-up (``uvicorn.Config`` set the
levels and handlers of the process's shared ``uvicorn`` loggers when it was made), and the
protocol writes no access lines, whatever handlers ``uvicorn.access`` has.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import re
import socket
import struct
import sys
import termios
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httptools
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from agentgate._http_limits import HttpLimits, declared_length

if TYPE_CHECKING:
    from collections.abc import Callable

    from uvicorn._types import ASGISendEvent

_UPGRADE_HEADERS = frozenset({b"upgrade", b"http2-settings"})
"""Request headers that only serve a protocol upgrade (dropped when the upgrade is ignored)."""
STALLED = "agentgate.stalled"
"""Scope key set (to the stall limit, in seconds) on a request whose caller stopped reading."""
ON_LOST = "agentgate.on_lost"
"""Scope key an app may set to a callable: called if the connection is lost before the answer began."""
LOST = "agentgate.lost"
"""Scope key set (True) when the connection was lost before the answer was complete."""
UNSENT = "agentgate.unsent"
"""Scope key set to a callable: the bytes of the connection still in the gateway's buffer (not
yet handed to the kernel), 0 once the connection is closed."""
RESET = "agentgate.reset"
"""Scope key set to a callable: resets the connection at once (its unsent bytes dropped), as a
stalled caller's is."""
_BEGAN = "agentgate.began"
"""Scope key set to a callable: called when the request's answer begins (its head is sent)."""
_BLANK_LINES = re.compile(rb"[\r\n]*")
"""The blank lines before a request line, which the parser skips (``_blank_lines``)."""


_GATEWAY = HttpLimits()
"""The gateway's limits: the protocol's own unless ``with_limits`` says otherwise."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses request heads over ``max_head_bytes`` (431) or slower
    than ``head_timeout_s`` (408); the connection is closed after either answer. An answer that
    the caller stops reading is cut after ``stall_s`` seconds without progress. The limits are
    the gateway's defaults (``HttpLimits()``) unless ``with_limits`` says otherwise."""

    max_head_bytes = _GATEWAY.max_head_bytes
    """Most bytes of a request head, and of a chunked body's framing and trailers beyond its content."""
    head_timeout_s = _GATEWAY.head_timeout_s
    """Seconds a request head may take to arrive."""
    stall_s: float | None = _GATEWAY.stall_s
    """Seconds the send buffer may stay full with none of it read before the connection is
    aborted; ``None``: never."""
    unread_body_s = _GATEWAY.unread_body_s
    """Seconds for the rest of a body (dropped) once its request was answered before it all came."""
    max_queued = 8
    """Pipelined requests queued behind the one being answered at which reading stops, until one
    of them is started (``_QueueFlow``); the rest of the read that filled the queue waits
    unparsed (``_parse_held``), so the queue never holds more. Below it reading goes on, so that
    a caller's close is seen, except while a request is queued with part of its body (uvicorn
    stops reading at the head of a request it queues, and here reading resumes at its end)."""

    _head_bytes = 0
    """Bytes read for the request's head so far (empty lines before its request line included)."""
    _head_begun = False
    """Whether the head's request line has begun: the empty lines before one (which the parser
    skips, RFC 9112, 2.2) cannot end it."""
    _parsed_head = 0
    """Bytes of the head the parser has handed over so far (its target, header names and values):
    ``_count_head``."""
    _message_bytes = 0
    """Bytes read for the request's body so far (its chunks' framing and trailer fields included)."""
    _body_bytes = 0
    """Bytes of the request's body (the parser's ``on_body``) so far."""
    _trailer_bytes = 0
    """Bytes of a chunked body's trailer fields the parser has handed over so far (names, values
    and 2 bytes for each one's ``:`` and line end)."""
    _reading_head = True
    _tail = b""
    """The last bytes of the head read so far (an end of head may span two reads)."""
    _head_timer: asyncio.TimerHandle | None = None
    _unread_timer: asyncio.TimerHandle | None = None
    """Set while the rest of an answered request's body is read (and dropped): ``unread_body_s``."""
    _stall_timer: asyncio.TimerHandle | None = None
    _stall_mark = 0
    """Bytes the caller had not taken when the stall clock last (re)started (``_untaken``)."""
    _running: RequestResponseCycle | None = None
    """The request whose app runs (and whose answer is written); pipelined ones wait behind it."""
    _stall_cycle: RequestResponseCycle | None = None
    """The request whose answer was being written when the stall clock started."""
    _refusal: _Refusal | None = None
    """A refusal (400, 408, 431) of a request pipelined behind one still being answered: written,
    and the connection closed, once the requests before it are answered (``_write_refusal``); one
    of no status for a request already answered (the connection closes after that answer)."""
    _reparse: bytes | None = None
    """The head of a request that asked for an upgrade, without it: parsed again in its place."""
    _held = b""
    """Bytes read and not parsed yet: the rest of a read after the request that filled the queue
    (``max_queued``), parsed as reading resumes (``_parse_held``); at most one read, as nothing
    more is read until they are parsed."""
    _parse_soon: asyncio.Handle | None = None
    """The scheduled parsing of ``_held``, once reading resumed."""
    _body_end: _BodyEnd | None = None
    """Where the body being read ends (``_piece_end``)."""

    @classmethod
    def with_limits(cls, limits: HttpLimits) -> type[BoundedHttpToolsProtocol]:
        """This protocol with ``limits`` (checked when they were made) instead of the gateway's
        defaults: the class a ``uvicorn.Config(http=...)`` takes."""
        settings = {
            "max_head_bytes": limits.max_head_bytes,
            "head_timeout_s": limits.head_timeout_s,
            "stall_s": limits.stall_s,
            "unread_body_s": limits.unread_body_s,
        }
        return type(cls.__name__, (cls,), {**settings, "__doc__": cls.__doc__})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # No access lines: uvicorn writes them whenever its shared ``uvicorn.access`` logger has a
        # handler (``Config(access_log=False)`` only worked by removing its handlers, process-wide).
        self.access_log = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _QueueFlow(transport, self._may_read, self._held_parsed)
        self._start_head_timer()

    def _may_read(self) -> bool:
        """Whether reading may resume: while fewer than ``max_queued`` requests are queued
        (``pipeline``) behind the one being answered, or once a refusal is pending (what comes
        after one is read and dropped)."""
        return len(self.pipeline) < self.max_queued or self._refusal is not None

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # what follows a refused request is never read
        self._held += data
        self._parse_held()

    def _parse_held(self) -> None:
        """Parse what was read (``_held``), a request's head or body at a time (``_piece_end``),
        until it is all parsed or ``max_queued`` requests are queued (a request is queued at the
        end of its head); the rest then waits in ``_held``, unparsed, and the transport reads
        nothing more until it is parsed (``_QueueFlow``). So the queue never passes the bound,
        however many requests one read holds: until review R87b a read was parsed whole, one
        read of 27-byte requests queued 4,738 of them (12 MiB), and a head that began in the
        read that filled the queue had its clock (``head_timeout_s``) run while nothing more was
        read (408 for a request sent whole, behind a call slower than that clock). Short of the
        bound a read is parsed whole, as uvicorn parses one (the body of a request queued
        behind the running one included, though reading paused at its head)."""
        if self._parse_soon is not None:
            self._parse_soon.cancel()  # (this call, or one that a read made needless)
            self._parse_soon = None
        data, at = self._held, 0
        while at < len(data) and self._refusal is None and self._may_read():
            if self.transport.is_closing():
                break
            end = self._piece_end(data, at)
            if end <= at:  # nothing of it, by a count the parser did not follow: the rest, whole
                end = len(data)
            self._parse(data[at:end])
            at = end
        self._held = b"" if self._refusal is not None else data[at:]
        if not self._held and not self.flow.read_paused:
            self.transport.resume_reading()  # held back while there were bytes to parse (``_QueueFlow``)

    def _held_parsed(self) -> bool:
        """Whether no read bytes wait to be parsed; else their parsing is scheduled (``_QueueFlow``:
        reading resumes with them, the transport once they are parsed)."""
        if not self._held:
            return True
        if self._parse_soon is None:
            # Not now: reading resumes inside the parser's callbacks and the app's ``receive``.
            self._parse_soon = self.loop.call_soon(self._parse_held)
        return False

    def _piece_end(self, data: bytes, at: int) -> int:
        """Where the piece of ``data`` from ``at`` to parse next ends: at the end of the head or of
        the body being read (a request is queued at the end of its head), or at the end of
        ``data``. Found as ``_parse`` counts a head (an end split between two reads
        included), and as ``_BodyEnd`` follows a body; the parser still reads both, and where it
        reads them otherwise (it then refuses them) only the piece's end moves."""
        if not self._reading_head:
            return len(data) if self._body_end is None else self._body_end.end(data, at)
        if self._tail:  # a head begun in an earlier read, whose end may begin in its last bytes
            spanning = _head_end(self._tail + data[at : at + 2])
            if spanning > len(self._tail):
                return at + spanning - len(self._tail)
        start = at if self._head_begun else at + _blank_lines(data, at)
        # Looked for no further than a head may be long: one longer is refused (431) as counted.
        end = _head_end(data, start, start + self.max_head_bytes + 3)
        return len(data) if end < 0 else end

    def _parse(self, data: bytes) -> None:
        """Parse ``data`` (a piece that ``_piece_end`` cut), the head's bytes counted and bounded
        first, the body's framing after."""
        if self._reading_head:
            # Counted before the parser buffers anything: a piece of a head ends at its end,
            # searched for from its request line (``_piece_end``; until review R84 a blank line
            # before one, which the parser skips, was taken for the head's end, and the rest of
            # the read went to the parser uncounted), so all of it is the head's.
            if self._head_timer is None:
                self._start_head_timer()
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse_large_head()
                return
        else:
            self._message_bytes += len(data)
        self._unset_keepalive_if_required()
        self._feed(data)
        if self._reading_head:  # this head, or one the parser began after a request ended here
            self._tail = (self._tail + data[-2:])[-2:] if self._head_begun else b""
        elif self._refusal is None:
            self._bound_framing()

    def _refuse_large_head(self) -> None:
        self._refuse(
            431,
            "Request Header Fields Too Large",
            f"the request line and headers are over {self.max_head_bytes} bytes",
        )

    def _count_head(self, size: int) -> None:
        """Count ``size`` bytes of the head as the parser hands them over: its target, and each
        header's name and value with 2 bytes for its ``:`` and line end; past ``max_head_bytes``,
        431 and the parser stopped. This bounds a head the count of ``_parse`` missed: one that
        began in the piece that ended the request before it (until review R84 it went to the
        app, whatever its size, with the pipelined request). Since review R87b a read is parsed a
        request at a time (``_piece_end``), so that is left only where a body ends otherwise than
        ``_BodyEnd`` found (a framing it reads otherwise than the parser).

        The count is what the parser keeps (and uvicorn buffers), a lower bound of the head's
        bytes, never more: 2 a header is the fewest its line has (``name:value`` and a bare LF),
        and httptools tells no byte offsets by which to count the rest exactly. Not counted: the
        request line's method, version and spaces, a line end's CR, the space after a ``:`` and
        any whitespace before a value (which the parser drops unkept). So such a head's bytes in
        the read it began in may pass ``max_head_bytes``, approximately: by a third for lines of
        the least form (``a:`` and CRLF), by a half for ``a: b``, by more where values are
        preceded by whitespace; never by more than that one read (at most 256 KiB with asyncio's
        or uvloop's transport), as each read after it is counted byte for byte by
        ``_parse``, and what is kept of the head stays within ``max_head_bytes``."""
        self._parsed_head += size
        if self._parsed_head > self.max_head_bytes:
            self._refuse_large_head()
            raise _HeadRefused

    def _feed(self, data: bytes) -> None:
        while True:
            # uvicorn's ``data_received``, but an upgrade it cannot serve is ignored, not half-read.
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                # Else refused (a head by ``_refused_head``, too large: answered), or closed.
                if self._refusal is None and not self.transport.is_closing():
                    self.logger.warning("Invalid HTTP request received.")
                    self.send_400_response("Invalid HTTP request received.")
            except httptools.HttpParserUpgrade as exc:
                if self._reparse is not None and self._refusal is None:
                    data, self._reparse = self._reparse + data[exc.args[0] :], None
                    # A fresh parser: the old one ended the message at its head, and after one that
                    # asked to close the connection it would skip the rest unread.
                    self.parser = self._new_parser()
                    continue
            return

    def _bound_framing(self) -> None:
        """Refuse a body whose bytes beyond its content (a chunked body's framing and trailer
        fields, which httptools buffers and uvicorn adds to the request's headers, without a
        bound) pass ``max_head_bytes`` plus its content's size: 431, and the connection closed
        (closed at once when the request was already answered, its body being dropped)."""
        if self._message_bytes - self._body_bytes > self.max_head_bytes + self._body_bytes:
            self._refuse_framing()

    def _refuse_framing(self) -> None:
        """431 for a body's framing and trailer fields too large, and the connection closed
        (closed with no answer when the request was already answered, its body being dropped:
        ``_refuse``)."""
        self._refuse(431, "Request Header Fields Too Large", "trailer fields or chunk framing too large")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        self._parsed_head = 0
        if self._head_timer is None:  # a head begun in the read that ended the request before it
            self._start_head_timer()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._reading_head:
            super().on_header(name, value)
            self._count_head(len(name) + len(value) + 2)
        else:
            # A trailer field, after a chunked body: not one of the request's headers (RFC 9110,
            # 6.5.1), which uvicorn would have it added to. Its bytes are bounded here, whatever
            # read it came in (``_bound_framing`` sees only reads that leave the body unfinished).
            self._trailer_bytes += len(name) + len(value) + 2
            if self._trailer_bytes > self.max_head_bytes + self._body_bytes:
                self._refuse_framing()
                raise _HeadRefused

    def _new_parser(self) -> httptools.HttpRequestParser:
        """A request parser set as uvicorn sets its own (``HttpToolsProtocol.__init__``)."""
        parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # httptools before 0.6.3 has no leniencies
            parser.set_dangerous_leniencies(lenient_data_after_close=True)
        return parser

    def on_headers_complete(self) -> None:
        if self.parser.should_upgrade():
            # httptools reads no body after a head that asks for an upgrade, and no upgrade is
            # served here: the head is parsed again without it (``_feed``), in its place.
            if self.parser.get_method() == b"CONNECT":
                self._refuse(400, "Bad Request", "CONNECT is not supported")
            else:
                self._reparse = self._head_without_upgrade()
            return
        if (refused := _refused_head(self.parser.get_http_version(), self.headers)) is not None:
            self._refuse(*refused)
            raise _HeadRefused  # the parser stops here: nothing after this head is read
        self._reading_head = False
        self._body_end = _BodyEnd.of(self.headers)
        self._head_bytes = 0
        self._message_bytes = self._body_bytes = self._trailer_bytes = 0
        self._tail = b""
        self._stop_head_timer()
        previous = self.cycle
        super().on_headers_complete()
        # uvicorn starts the new request at once unless one is still being answered; then it
        # queues it (``pipeline``), and ``cycle`` names the queued one from now on.
        if self.cycle is not previous:
            one_oh = self.cycle.scope["http_version"] == "1.0"
            self.cycle.__class__ = _CloseDelimitedCycle if one_oh else _AnswerCycle
        if self.cycle is not previous and (previous is None or previous.response_complete):
            self._started(self.cycle)

    def _started(self, cycle: RequestResponseCycle) -> None:
        self._running = cycle
        cycle.scope[_BEGAN] = self._answer_began  # type: ignore[literal-required]
        cycle.scope[UNSENT] = self._unsent  # type: ignore[literal-required]
        cycle.scope[RESET] = self._reset  # type: ignore[literal-required]

    def _answer_began(self) -> None:
        """An answer's head is about to be written: the last answer's tail clock measured the
        caller against that answer's bytes, and this one's would count as not taken. Its own pause,
        or its end, starts a clock. (Before it writes, a clock of the tail goes on: a caller that
        stopped reading is cut even while the next answer's app has nothing to write yet.)"""
        if not self.flow.write_paused and not self.transport.is_closing():
            self._stop_stall_timer()  # (a connection closing, refused, writes nothing more)

    def _head_without_upgrade(self) -> bytes:
        """The request head just parsed (uvicorn keeps its method, target and headers), without
        the headers of the upgrade it asked for, nor ``upgrade`` among its ``Connection`` options."""
        version = self.parser.get_http_version().encode("ascii")
        lines = [b"%s %s HTTP/%s" % (self.parser.get_method(), self.url, version)]
        for name, value in self.headers:
            if name == b"connection":
                options = [o.strip() for o in value.split(b",")]
                value = b", ".join(o for o in options if o.lower() not in _UPGRADE_HEADERS)
                if not value:
                    continue
            elif name in _UPGRADE_HEADERS:
                continue
            lines.append(name + b": " + value)
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def on_message_complete(self) -> None:
        if self._reparse is not None or self._refusal is not None:
            return  # a head asking for an upgrade: the request is read again without it
        super().on_message_complete()
        self._stop_unread_timer()
        self._reading_head = True
        self._head_begun = False
        self._head_bytes = 0
        self._tail = b""
        # uvicorn pauses reading while a large body waits for the app, and resumes it only in
        # ``receive``, which an app that has its whole body never calls again: the caller closing
        # its connection (the end of the stream, read only when reading) would go unseen until
        # the answer. The body is all here; what comes next is a next request's head (bounded).
        # Not with ``max_queued`` requests queued (``_QueueFlow``): until review R87 this resumed
        # reading after every pipelined request, and a caller that wrote requests and read no
        # answer had each one queued, hundreds of MB of them on one connection.
        self.flow.resume_reading()

    def shutdown(self) -> None:
        # uvicorn keeps no connection alive past the answer of its newest request (``cycle``),
        # which with requests pipelined is a queued one: the running answer ended with the
        # connection kept alive, and uvicorn started the next request of a stopping server
        # (review R76: decided, sent to a backend and answered during the shutdown grace). The
        # running one's end closes the connection; nothing queued behind it is started.
        running = self._running
        if running is not None and not running.response_complete:
            running.keep_alive = False
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._parse_soon is not None:
            self._parse_soon.cancel()
            self._parse_soon = None
        self._held = b""
        self._stop_head_timer()
        self._stop_unread_timer()
        self._stop_stall_timer()
        super().connection_lost(exc)
        running = self._running
        if running is not None and running is not self.cycle and not running.response_complete:
            # uvicorn marks only its newest request disconnected: with pipelined ones queued, the
            # one running would go on writing to a closed connection and never be told.
            running.disconnected = True
            running.message_event.set()
        # uvicorn tells an app its caller left only through ``receive``, which an app waiting on
        # something else (a backend) does not call: the app's hook, if it set one, is told now.
        queued = [cycle for cycle, _ in self.pipeline]
        for cycle in dict.fromkeys(c for c in (running, self.cycle, *queued) if c is not None):
            if cycle.response_complete:
                continue
            cycle.scope[LOST] = True  # type: ignore[literal-required]
            lost = cycle.scope.get(ON_LOST)
            if callable(lost) and not cycle.response_started:
                lost()

    def pause_writing(self) -> None:
        # The send buffer passed its high-water mark: the caller reads slower than we write.
        super().pause_writing()
        self._stall_cycle = self._running
        self._start_stall_clock(self._untaken())

    def resume_writing(self) -> None:
        self._stop_stall_timer()
        super().resume_writing()
        # Below the low-water mark with every answer written: nothing will write (and so pause)
        # again, and the tail's clock of ``on_response_complete`` was this one. A caller that
        # stops reading here would hold the connection for ever (asyncio's own loop resumes
        # below the mark; uvloop, once the buffer is empty).
        if not self._answering():
            self._start_tail_clock(self._stall_cycle)

    def on_response_complete(self) -> None:
        answered = self._running
        queued = self.pipeline[-1][0] if self.pipeline else None
        super().on_response_complete()
        if queued is not None and not any(cycle is queued for cycle, _ in self.pipeline):
            self._started(queued)  # uvicorn started the next pipelined request
        if not self.transport.is_closing():
            # uvicorn resumes reading before it starts the next queued request: with that one
            # started, the queue may be short enough to read again (``_QueueFlow``).
            self.flow.resume_reading()
        if self._reading_head and self._head_timer is not None:
            # A next head is arriving: its own clock bounds it (408), not the keep-alive that
            # uvicorn has just armed, which would close the connection with no answer.
            self._unset_keepalive_if_required()
        if self._refusal is not None and not self._answering() and not self.transport.is_closing():
            self._write_refusal(self._refusal)  # the requests before the refused one are answered
        # The answer's tail still waits in the transport (below the high-water mark, so writing
        # never paused): the connection's close or keep-alive would wait for it for ever.
        self._start_tail_clock(answered)
        if answered is not None and answered.more_body and not self.transport.is_closing():
            # Answered before its body had all arrived (refused: a body too large, an encoding not
            # supported): the rest is read and dropped, and every byte of it would hold the
            # connection open again (uvicorn's keep-alive clock restarts on any data), so a body
            # trickled past its refusal held the connection for ever. It has ``unread_body_s`` more.
            self._unread_timer = self.loop.call_later(self.unread_body_s, self._unread_too_slow)

    def _start_tail_clock(self, cycle: RequestResponseCycle | None) -> None:
        """Start the stall clock for bytes written that wait in the transport, unless one runs:
        when an answer ends, when writing resumes with every answer written, and when a refusal
        closes the connection (a close waits for those bytes)."""
        running = self._running
        if (
            cycle is not None
            and running is not None
            and running is not cycle
            and running.response_started
            and not running.response_complete
        ):
            return  # the next answer is being written: its own end or pause starts the clock
        if self._stall_timer is None and self.transport.get_write_buffer_size() > 0:
            self._stall_cycle = cycle
            self._start_stall_clock(self._untaken())

    def _start_stall_clock(self, untaken: int) -> None:
        """(Re)start the stall clock, the one place it starts: ``stall_s`` from now,
        ``_check_stall`` asks whether the caller took any of the ``untaken`` bytes it has not taken
        now. Started when writing pauses, when an answer's tail waits (``_start_tail_clock``) and
        again after progress (``_check_stall``); stopped by ``_stop_stall_timer`` alone."""
        self._stop_stall_timer()
        if self.stall_s is None:
            return  # no stall limit: the answer waits for its caller for ever, as uvicorn's does
        self._stall_mark = untaken
        self._stall_timer = self.loop.call_later(self.stall_s, self._check_stall)

    def _stop_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _untaken(self) -> int:
        """Bytes written that the caller has not taken yet: those in the transport's buffer and,
        where the system tells (Linux: ``SIOCOUTQ``), those in the socket's send queue, so that
        a caller reading a little at a time counts as reading (the kernel only reports the
        socket writable again once a third of its buffer, up to MiBs, is free)."""
        waiting = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):
                queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
                waiting += int.from_bytes(queued, sys.byteorder, signed=True)
        return waiting

    def _unsent(self) -> int:
        """Bytes written to this connection still in the transport's buffer (asyncio empties it
        when the connection is lost or aborted)."""
        return self.transport.get_write_buffer_size()

    def _check_stall(self) -> None:
        """``stall_s`` after writing paused (or after the last progress): a caller that took some
        of the bytes meanwhile gets another ``stall_s``; one that took nothing is cut."""
        self._stall_timer = None
        if self.transport.get_write_buffer_size() == 0:
            return  # all of it is with the kernel, which delivers it or gives up on its own
        waiting = self._untaken()
        if waiting < self._stall_mark:
            self._start_stall_clock(waiting)
            return
        stalled = self._stall_cycle
        if stalled is not None and not stalled.response_complete:
            stalled.scope[STALLED] = self.stall_s  # type: ignore[literal-required]  # (not None: its clock ran)
        self._reset()

    def _reset(self) -> None:
        """Reset the connection: its unread and unsent bytes are dropped."""
        # A reset, not a close: close() would wait for the unread bytes for ever, and a closed
        # socket the kernel still tries to deliver holds its MiBs of buffers (nginx's
        # reset_timedout_connection does the same).
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _stop_unread_timer(self) -> None:
        if self._unread_timer is not None:
            self._unread_timer.cancel()
            self._unread_timer = None

    def _unread_too_slow(self) -> None:
        self._unread_timer = None
        self.transport.close()

    def _start_head_timer(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._reading_head and not self.transport.is_closing():
            self._refuse(
                408, "Request Timeout", f"the request head did not arrive within {self.head_timeout_s:g} s"
            )

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser refuses, after those pipelined before it."""
        self._refuse(400, "Bad Request", msg)

    def _refuse(self, status: int, reason: str, text: str | None = None) -> None:
        """Answer ``status`` with ``text`` (default: ``reason``) and close the connection; nothing
        after the refused request is read. A request pipelined behind others still being answered
        is refused once they are (``on_response_complete``), so that no refusal is read as the
        answer to an earlier request, nor cuts it. A request already answered (before its body
        ended, whose rest is refused) gets no second answer: its connection closes after the first.
        A refusal's body is made as it is written (``_write_refusal``), never for one not sent."""
        self._stop_head_timer()
        running = self._running
        refused = None if self._reading_head else self.cycle  # the request whose body is refused
        answered = refused is not None and refused.response_started
        # A request answered before its body ended (the rest being read to be dropped) has that
        # answer as its one, and the connection closes once it is written: no status. Until review
        # R91 this refusal was written after it, a second answer to one request (a framing
        # desync), and until review R91b it was still made, and so counted in the gateway's
        # agentgate_gateway_errors_total, though never sent.
        refusal = self._refusal = _Refusal(None if answered else status, reason, text or reason)
        if refused is not None and refused is running and not answered:
            # The request refused is the one whose body the app is reading (a chunked body the
            # parser rejects): nothing was decided yet. The app is told its caller is gone (it
            # decides and audits nothing), and this refusal is the request's one answer, at once,
            # not the app's answer after its body timeout followed by this one as a second.
            refused.disconnected = True
            refused.message_event.set()
        else:
            if not answered and refused is not None and refused is not running:
                # Queued behind requests still being answered (the newest, so first in uvicorn's
                # ``pipeline``): it is never started, and its refusal follows their answers. Until
                # review R91 uvicorn started it after them, and its app waited for a body that
                # would not come, with nothing more read: the refusal was written after its answer
                # if ever (an app with a body timeout answered 408, the body malformed, not late).
                if self.pipeline and self.pipeline[0][0] is refused:
                    self.pipeline.popleft()
                refused.disconnected = True
            if self._answering():
                # Reading goes on (dropped), so that a caller that hangs up is still seen, even
                # with ``max_queued`` requests queued (``_QueueFlow``).
                self.flow.resume_reading()
                return
        self._write_refusal(refusal)
        self._start_tail_clock(None)  # a caller that stopped reading would hold the close

    def _write_refusal(self, refusal: _Refusal) -> None:
        """Write ``refusal`` (nothing, for a request already answered) and close the connection.
        Its body is made here (``refusal_body``), as it is written: a refusal queued behind an
        answer that never ended (the caller left) is never made, so never counted by the gateway
        (until review R91c it was made, and counted, when the request was refused)."""
        if refusal.status is not None:
            media_type, body = self.refusal_body(refusal.status, refusal.text)
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                % (
                    refusal.status,
                    refusal.reason.encode("ascii"),
                    media_type.encode("ascii"),
                    len(body),
                    body,
                )
            )
        self.transport.close()

    def refusal_body(self, status: int, text: str) -> tuple[str, bytes]:
        """The media type and body of the protocol's refusal ``status``, which says ``text``: plain
        text, as uvicorn's own. A server whose API has an error shape of its own answers in it
        (the gateway: OpenAI's, ``agentgate/dispatch/gateway/_server.py``). Called once for each
        refusal, as it is written to the connection, and for no refusal that is not."""
        return "text/plain; charset=utf-8", text.encode("ascii")

    def _answering(self) -> bool:
        """Whether a request before the one being read is still being answered, or queued."""
        running = self._running
        return bool(self.pipeline) or (running is not None and not running.response_complete)


class _QueueFlow(FlowControl):
    """uvicorn's flow control of a connection, whose reading does not resume while ``may_read``
    says no: while ``max_queued`` pipelined requests are queued behind the one being answered.
    Reading is the parsing of what was read: with bytes of a read left unparsed when it paused
    (``held_parsed`` says no, and schedules their parsing), the transport reads again only once
    they are parsed (``BoundedHttpToolsProtocol._parse_held``).

    uvicorn pauses reading when it queues a pipelined request, and resumes it after every answer
    and whenever the running request's app asks for its body (``receive``); the gateway also
    resumed it after every request's end (to see a caller's close). So a caller that wrote
    requests and read no answer had all of them queued. Here the queue holds at most
    ``max_queued`` requests (until review R87b, also every request of the read that took it
    there)."""

    def __init__(
        self, transport: asyncio.Transport, may_read: Callable[[], bool], held_parsed: Callable[[], bool]
    ) -> None:
        super().__init__(transport)
        self._may_read = may_read
        self._held_parsed = held_parsed

    def resume_reading(self) -> None:
        if not self._may_read():
            return
        if self.read_paused and not self._held_parsed():
            self.read_paused = False  # the transport resumes once what it read is parsed
            return
        super().resume_reading()


class EmbeddedConfig(uvicorn.Config):
    """uvicorn's configuration, less its logging set-up.

    ``uvicorn.Config`` configures the process's shared ``uvicorn``, ``uvicorn.error`` and
    ``uvicorn.access`` loggers when it is made: their handlers replaced, their levels set, access
    logging's propagation turned off. Those are the application's to set (it may embed the
    gateway or the simulator, or run a uvicorn server of its own in the same process): until
    review R62 making a ``GatewayServer`` set ``uvicorn.error`` to WARNING for the whole process,
    and until review R63 starting a ``SimServer`` set it to CRITICAL. uvicorn's own lines go to
    those loggers as the application set them; ``BoundedHttpToolsProtocol`` writes no access line.
    """

    def configure_logging(self) -> None:
        """Leave the process's logging as it is."""


class _AnswerCycle(RequestResponseCycle):
    """A request's cycle that tells the protocol when its answer begins (``_BEGAN``)."""

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            began = self.scope.get(_BEGAN)
            if callable(began):
                began()
        await super().send(message)


class _CloseDelimitedCycle(_AnswerCycle):
    """An HTTP/1.0 request's cycle: an answer without ``Content-Length`` (nor its own
    ``Transfer-Encoding``) is sent as it comes, unframed, and ends when the connection closes
    (uvicorn closes every HTTP/1.0 connection after its answer)."""

    _unframed = False
    """Whether the answer has no length of its own: its body ends with the connection."""

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            framing = {b"content-length", b"transfer-encoding"}
            self._unframed = not any(name.lower() in framing for name, _ in message.get("headers", []))
            if self._unframed:
                self.chunked_encoding = False  # uvicorn's default for an answer of unknown length
        elif message["type"] == "http.response.body" and self._unframed:
            # uvicorn checks an unchunked body against its length: each piece is its own length.
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)


@dataclass(frozen=True)
class _Refusal:
    """The protocol's refusal of a request (``BoundedHttpToolsProtocol._refuse``), written once
    the answers before it are (``_write_refusal``)."""

    status: int | None
    """The status answered; ``None`` for a request already answered: nothing more is written."""
    reason: str
    """The status line's reason phrase."""
    text: str
    """What the refusal's body says (``refusal_body``)."""


class _BodyEnd:
    """Where the body of a request whose head was just parsed ends, in the bytes read after it:
    its ``Content-Length`` bytes, or for a chunked body the empty line that ends its trailer
    section, the chunks' sizes followed to find it (RFC 9112, 7.1). It says where to stop
    feeding the parser (``BoundedHttpToolsProtocol._piece_end``), which reads the body itself
    and refuses a framing that is not right; chunk data is skipped whole, never searched."""

    _SIZE, _DATA_END, _TRAILERS = range(3)

    def __init__(self, length: int | None) -> None:
        self._length = length
        """Bytes of a ``Content-Length`` body left; ``None`` for a chunked body."""
        self._state = self._SIZE
        self._data_left = 0
        """Bytes of the current chunk's data left."""
        self._digits = b""
        """The current chunk size line's hex digits so far (leading zeros dropped, at most 17:
        more is a size the parser refuses)."""
        self._past_digits = False
        self._blank = True
        """Whether the current trailer section line has had nothing but its line end so far."""

    @classmethod
    def of(cls, headers: list[tuple[bytes, bytes]]) -> _BodyEnd:
        """The end of the body that ``headers`` (uvicorn's, names in lower case) announce: a
        request with neither a ``Transfer-Encoding`` nor a ``Content-Length`` has none."""
        if any(name == b"transfer-encoding" for name, _ in headers):
            return cls(None)
        lengths = [value for name, value in headers if name == b"content-length"]
        return cls((declared_length(lengths[0]) if len(lengths) == 1 else None) or 0)

    def end(self, data: bytes, at: int) -> int:
        """The offset in ``data`` just past the body's end, read from ``at``; ``len(data)`` if the
        body goes on past it (the next call reads on from there)."""
        if self._length is not None:
            taken = min(self._length, len(data) - at)
            self._length -= taken
            return at + taken
        while at < len(data):
            if self._data_left:
                taken = min(self._data_left, len(data) - at)
                self._data_left -= taken
                at += taken
                continue
            line_end = data.find(b"\n", at)
            stop = len(data) if line_end < 0 else line_end
            if self._state == self._SIZE and not self._past_digits:
                digits = _HEX_DIGITS.match(data, at, stop)
                size = digits.end() if digits else at
                self._digits = (self._digits + data[at:size]).lstrip(b"0")[:17]
                self._past_digits = size < stop
            elif self._state == self._TRAILERS and data[at:stop] not in (b"", b"\r"):
                self._blank = False
            if line_end < 0:
                return len(data)
            at = line_end + 1
            if self._state == self._SIZE:
                self._data_left = int(self._digits or b"0", 16)
                self._state = self._DATA_END if self._data_left else self._TRAILERS
                self._digits, self._past_digits = b"", False
            elif self._state == self._DATA_END:
                self._state = self._SIZE  # the line end after a chunk's data
            elif self._blank:
                self._length = 0  # the empty line that ends the trailer section: the body's end
                return at
            else:
                self._blank = True
        return at


_HEX_DIGITS = re.compile(rb"[0-9A-Fa-f]*")


class _HeadRefused(Exception):
    """Raised in the parser's callback for a head refused (``_refused_head``, ``_count_head``)
    or trailer fields too large (``on_header``), to stop the parser."""


_HOST = re.compile(rb"(\[[0-9A-Za-z:.]+\]|[-A-Za-z0-9._~%!$&'()*+,;=]*)(:[0-9]*)?")
"""A ``Host`` header's value: a host name or address, and a port (RFC 9110, 7.2; RFC 3986, 3.2.2)."""


def _refused_head(version: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, str, str] | None:
    """The status, reason and text of the refusal of a request head the parser accepted, or
    ``None``: an HTTP version other than 1.0 and 1.1 (505); an HTTP/1.1 request without a
    ``Host`` header, or any with several or with one that is not a host (400, RFC 9112, 3.2);
    a ``Transfer-Encoding`` that names a coding other than ``chunked`` (501, RFC 9112, 6.1: its
    body would be read still coded; httptools refuses one where ``chunked`` is not the last)."""
    if version not in ("1.0", "1.1"):
        return 505, "HTTP Version Not Supported", f"HTTP/{version} is not supported: send HTTP/1.1"
    hosts = [value for name, value in headers if name == b"host"]
    if len(hosts) > 1 or (version == "1.1" and not hosts):
        return 400, "Bad Request", f"the request has {len(hosts)} Host headers: send one"
    if hosts and not _HOST.fullmatch(hosts[0]):
        return 400, "Bad Request", "the Host header is not a host and port"
    for name, value in headers:
        codings = (c.strip().lower() for c in value.split(b",")) if name == b"transfer-encoding" else ()
        if any(c and c != b"chunked" for c in codings):
            return 501, "Not Implemented", "no transfer coding but chunked is supported"
    return None


def _blank_lines(data: bytes, at: int) -> int:
    """How many bytes of blank lines ``data`` holds from ``at``: measured, where ``lstrip`` copied a read."""
    match = _BLANK_LINES.match(data, at)
    return match.end() - at if match else 0


def _head_end(data: bytes, start: int = 0, stop: int | None = None) -> int:
    """The offset just past the blank line that ends a request head in ``data`` (CRLF or bare LF
    line ends) whose request line begins at ``start`` (after the empty lines before it), looked
    for before ``stop`` (the end of ``data`` by default), or -1. The bare LF end is looked for
    only before the CRLF one: until a regression review (round c) of R87 it was looked for to
    the end of ``data``, which in CRLF traffic holds none, and a read of many pipelined requests,
    parsed a head at a time behind a full queue (``_piece_end``), was scanned whole for each."""
    stop = len(data) if stop is None else stop
    crlf = data.find(b"\n\r\n", start, stop)
    lf = data.find(b"\n\n", start, stop if crlf < 0 else crlf + 2)
    ends = [at + size for at, size in ((crlf, 3), (lf, 2)) if at >= 0]
    return min(ends, default=-1)
