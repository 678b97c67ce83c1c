"""A lean HTTP/1.1 client for the gateway's backend calls: pooled keep-alive connections.

The gateway's backend call is one POST of a small JSON body and one JSON answer. aiohttp does that
with a request object, a response object, a stream reader and timers per call; this pool writes
the request in one ``send`` on a kept-alive connection and parses the answer with httptools (the
parser uvicorn uses), which takes about 0.3 ms less per call on the development machine. Streamed
answers are read the same way (``stream``), their lines handed on as they arrive. Plain http
only: the gateway leaves https backends on aiohttp. Timeouts are the caller's
(``BackendClient`` bounds the call and each streamed line); a connection is opened within
``connect_s``.

A connection carries one request at a time and goes back to the pool only after a complete answer
that allows keep-alive; anything else (an error, a cancelled call, a server that closes) closes
it. An idle connection is not reused after ``idle_s`` (below uvicorn's 5 s keep-alive, so that a
backend does not close it under a request). A backend whose keep-alive is shorter may: a request
sent on an idle connection as the backend closes it fails before any byte of an answer, never
read, and is sent once more on a new connection (``_send``; review R95, as the dispatcher's
aiohttp pool does it, ``dispatch/_connector.py``, whose docstring says why that is safe for a
chat call's POST). Once a byte of the answer has arrived, or on a new connection, it is not.

The request carries only what the caller of ``post`` or ``stream`` gives: the URL, the JSON body
and the backend's ``authorization`` (``BackendClient`` passes its API key's ``Bearer`` value);
no header of the gateway's own caller is ever written here. Every request asks for
``Accept-Encoding: identity`` (this client decodes nothing); a successful answer with another
``Content-Encoding`` is an ``UpstreamError`` naming it, and of an error answer with one, words
that say so are quoted instead of its body (``_not_decoded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

from agentgate._http_limits import declared_length
from agentgate.dispatch.backends import (
    MAX_ANSWER_BYTES,
    MAX_LINE_BYTES,
    EncodedAnswer,
    WholeBody,
    _encoded,
    _encoding_shown,
    _not_decoded_words,
    split_lines,
)
from agentgate.errors import AnswerTooLarge

HIGH_WATER = 1 << 18
"""Bytes of a streamed answer read ahead of its reader before the socket stops being read."""
MAX_FRAMING_BYTES = 1 << 20
"""The most bytes read in a row that carry none of the answer's body: its head, chunk framing,
trailers. An engine's head is a few hundred bytes; an endless head, header line or trailer is
refused instead of being buffered (and copied again by the parser with each read) until the
call's timeout."""


class SendMark:
    """Whether a call has begun sending a request to a backend (``SENDING``), and the call's
    request as the gateway hands it to the dispatcher (``request``)."""

    __slots__ = ("request", "sent")

    def __init__(self, request: Mapping[str, Any] | None = None) -> None:
        self.sent = False
        self.request = request
        """The call's body (``None``: not known), whose prompt an encoded error answer's
        ``Content-Encoding`` is scrubbed of (``_not_decoded``): the body the pool is given is
        that one as ``BackendClient`` wrote it, the same messages, so it need not be parsed."""


SENDING: ContextVar[SendMark | None] = ContextVar("agentgate_gateway_sending", default=None)
"""Set by the gateway around a call's dispatch: the pool marks it ``sent`` as it begins to
send a request (connecting included), so that a call cut while it still waited (in line for a
backend's slot, or for a backend to come back) is known never to have reached one; and reads the
call's prompt from it (``SendMark.request``)."""


class UpstreamError(ConnectionError):
    """The backend's answer could not be read (connection closed early, bytes that are not HTTP)."""


class EncodedUpstreamAnswer(EncodedAnswer, UpstreamError):
    """A successful answer sent with a ``Content-Encoding`` other than ``identity``, which the
    pool asked for none of and does not decode; ``encoding`` is the header as sent."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time: ``open`` sends it and waits for the
    answer's head, then ``read_all``, ``read_start`` or ``pieces`` read its body as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.heard = False
        """Whether any byte has arrived since the last request was sent (``open``)."""
        self._parser = httptools.HttpResponseParser(self)
        self._wake: asyncio.Future[None] | None = None
        self._paused = False  # the socket is not being read (back-pressure, see ``on_body``)
        self._reset()

    def _reset(self) -> None:
        self._body: list[bytes] = []
        self._buffered = 0  # bytes in ``_body``
        self._read = 0  # body bytes of an answer read whole (``read_all``), at most MAX_ANSWER_BYTES
        self._framing = 0  # bytes read since the last body byte, at most MAX_FRAMING_BYTES
        self._streaming = False  # read by ``pieces``: reading pauses when the reader falls behind
        self._resume()
        self._status = 0
        self.retry_after: str | None = None
        """The answer's ``Retry-After`` header, as sent (``None`` without one)."""
        self._encodings: list[str] = []  # an error answer's Content-Encoding headers (``encoding``)
        self._error: Exception | None = None
        self._headers_done = False
        self._interim = False  # reading a 1xx answer's head, which the final answer follows
        self._complete = False
        self._framed = False  # a Content-Length or chunked answer (else it ends when the connection does)
        self._keep_alive = False

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        self.heard = True
        self._framing += len(data)  # back to 0 at each body byte (``on_body``)
        if self._framing > MAX_FRAMING_BYTES:
            self._fail(UpstreamError(f"over {MAX_FRAMING_BYTES} bytes of head or framing without any body"))
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # not an HttpParserError: it would escape to the loop
            self._fail(UpstreamError("the backend switched protocols (HTTP 101): not an answer"))
            self.close()
        except httptools.HttpParserError as exc:  # also an exception a callback raised
            self._fail(UpstreamError(f"not an HTTP answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if exc is None and self._headers_done and not self._framed and not self._complete:
            self.on_message_complete()  # an answer delimited by the end of the connection
            return
        if not self._complete:
            self._fail(UpstreamError(f"the backend closed the connection ({exc or 'EOF'}) before answering"))

    # --- httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:
            # A second answer to one request (or one sent to an idle connection): nothing asked
            # for it, and a later request's answer could not be told from it. Parsing stops here
            # (its body is not added to the answer read), and the connection is closed, not kept.
            self._fail(UpstreamError("the backend sent an answer no request asked for"))
            raise UpstreamError("an answer no request asked for")

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True
        elif name == b"retry-after":
            self.retry_after = value.decode("latin-1")
        elif name == b"content-encoding" and self._parser.get_status_code() >= 300:
            # An error answer's body is quoted, not read as an answer: its encoding is said
            # instead of its bytes (``_not_decoded``), as ``BackendClient`` says it on its own paths.
            self._encodings.append(_header_text(value))
        elif (
            name == b"content-encoding"
            and value.strip().lower() not in (b"", b"identity")
            and 200 <= self._parser.get_status_code() < 300
        ):
            # Asked for none (``Accept-Encoding: identity``): its body, which this client does not
            # decode, is not the JSON or SSE it would be read as. Until review R67 it was read as
            # a malformed chat completion. Parsing stops here, the connection closed. The header
            # goes with the error as sent: ``BackendClient`` quotes it scrubbed of the prompt, which
            # the pool does not know, before it is cut and escaped (``_encoding_shown``); until a
            # regression review of R90 it was cut and escaped here, and scrubbed after.
            encoding = _header_text(value)
            self._fail(
                EncodedUpstreamAnswer(
                    f"the backend answered with Content-Encoding: {_encoding_shown(encoding, None)}, "
                    "which it was not asked for",
                    encoding,
                )
            )
            raise UpstreamError("an encoded answer")
        # Only an answer read whole is bounded up front: of an error answer (300 or more) only the
        # start is read (``read_start``), whatever length it declares, and a 400 stays a 400.
        if (
            name == b"content-length"
            and self._parser.get_status_code() < 300
            and (declared_length(value) or 0) > MAX_ANSWER_BYTES
        ):
            self._too_large()

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            # An interim answer (100 Continue, 103 Early Hints) is not the answer: a client reads
            # past any number of them to the final one (RFC 9110, 15.2), as aiohttp and httpx do.
            # 101 (a switch of protocol) ends in ``HttpParserUpgrade``: refused in ``data_received``.
            self._interim = True
            return
        self._headers_done = True
        self._status = status
        self._notify()

    def on_body(self, body: bytes) -> None:
        self._framing = 0
        if not self._streaming:
            # An answer read whole is held whole: no chat completion is larger than this.
            self._read += len(body)
            if self._read > MAX_ANSWER_BYTES:
                self._too_large()
                return
        self._body.append(body)
        self._buffered += len(body)
        if self._streaming and self._buffered > HIGH_WATER and self.transport is not None:
            # Back-pressure: the caller reads slower than the backend writes. Stop reading the
            # socket, so the backend's own writes block, instead of buffering its answer here.
            self.transport.pause_reading()
            self._paused = True
        self._notify()

    def on_message_complete(self) -> None:
        if self._interim:  # the end of an interim answer: its head said nothing about the final one's
            self._interim = self._framed = False
            self.retry_after = None
            self._encodings = []
            return
        self._complete = True
        # Read now: the parser answers False once it has moved past the message.
        self._keep_alive = self._framed and self._parser.should_keep_alive()
        self._notify()

    # --- use ------------------------------------------------------------------------------

    @property
    def encoding(self) -> str | None:
        """An error answer's ``Content-Encoding`` headers, as sent, joined by ``", "`` as httpx
        joins them (``None`` without one; a successful answer's is refused in ``on_header``)."""
        return ", ".join(self._encodings) if self._encodings else None

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    async def open(self, data: bytes) -> int:
        """Send ``data`` (a whole request) and return the answer's status once its head is read.

        Raises ``UpstreamError`` if the connection closes first or the answer is not HTTP.
        """
        if self.transport is None:
            raise UpstreamError("the connection is closed")
        self._reset()
        self.heard = False
        self.transport.write(data)
        await self._until(lambda: self._headers_done)
        return self._status

    async def read_all(self) -> bytes:
        """The rest of the answer's body, once it is complete; raises ``UpstreamError`` as ``open``."""
        await self._until(lambda: self._complete)
        body, self._body = b"".join(self._body), []
        return body

    async def read_start(self) -> bytes:
        """What has arrived of the answer's body once any of it has (all of it, a ``WholeBody``,
        if it is complete by then: else it is taken as cut, ``BackendClient._excerpt``); raises
        ``UpstreamError`` as ``open``. For an error answer's start, to quote: the rest, which may
        never end, is neither waited for nor held."""
        await self._until(lambda: bool(self._body) or self._complete)
        body, self._body, self._buffered = b"".join(self._body), [], 0
        return WholeBody(body) if self._complete else body

    async def pieces(self) -> AsyncGenerator[bytes, None]:
        """The answer's body as it arrives, until it is complete; raises ``UpstreamError`` as ``open``.

        At most about ``HIGH_WATER`` bytes wait here for the reader: past that the socket is not
        read until the reader takes them, so a slow caller slows the backend down (TCP flow
        control) rather than filling the gateway's memory.
        """
        self._streaming = True
        while True:
            if self._body:
                piece, self._body, self._buffered = b"".join(self._body), [], 0
                self._resume()
                yield piece
            elif self._complete:
                return
            else:
                await self._until(lambda: bool(self._body) or self._complete)

    def reusable(self) -> bool:
        """True after a complete answer that lets the connection stay open."""
        return self._complete and self._keep_alive and self.usable

    def _resume(self) -> None:
        if self._paused and self.transport is not None:
            self.transport.resume_reading()
        self._paused = False

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self._error is not None:
                raise self._error
            self._wake = asyncio.get_running_loop().create_future()
            try:
                await self._wake
            finally:
                self._wake = None

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self._error is None:  # the first cause: closing after it must not replace it
            self._error = exc
        self._notify()

    def _too_large(self) -> None:
        """Refuse a successful answer over ``MAX_ANSWER_BYTES``: ``AnswerTooLarge``, the call's own
        doing (``BackendClient.chat``); an error answer's body that runs past it is an
        ``UpstreamError`` (only its start is read: it cannot come here under ``read_start``'s use)."""
        if self._error is None:
            message = f"the answer is larger than {MAX_ANSWER_BYTES} bytes"
            status = self._parser.get_status_code()
            self._fail(AnswerTooLarge(message) if 200 <= status < 300 else UpstreamError(message))
        self._body, self._buffered = [], 0
        self.close()


class UpstreamPool:
    """Kept-alive HTTP/1.1 connections per backend origin, for ``post`` and ``stream``; ``aclose``
    closes them all.

    Used on one event loop only.
    """

    def __init__(
        self,
        *,
        connect_s: float = 2.0,
        idle_s: float = 4.0,
        max_idle: int = 100,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self.connect_s = connect_s
        self.max_line = max_line
        self.idle_s = idle_s
        self.max_idle = max_idle
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._heads: dict[tuple[str, str | None], tuple[tuple[str, int], bytes]] = {}
        self._closed = False

    async def post(
        self,
        url: str,
        body: bytes,
        authorization: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, str | None]:
        """POST ``body`` (JSON) to ``url`` (``http://host:port/path``), with the ``Authorization``
        header ``authorization`` when given: the answer's status and body (for a status of 300 or
        more, only the start of the body: ``read_start``, an error's, to quote; or, for one sent
        with a ``Content-Encoding``, words that say so, ``_not_decoded``), and its
        ``Retry-After`` header (``None`` without one).

        Raises ``OSError`` (``UpstreamError``, a refused connection, an ``authorization`` a header
        cannot carry, ...) if no answer can be read, ``TimeoutError`` if no connection opens within
        ``connect_s``, ``AnswerTooLarge`` for a successful answer over ``MAX_ANSWER_BYTES`` (refused
        as it arrives, or for the length it declares; the connection closed).
        """
        origin, connection, status = await self._send(url, body, authorization, headers)
        try:
            # The rest of an error's body may never end: not waited for (nor the connection kept,
            # unless its answer was complete).
            answer = await (
                _error_start(connection, body, authorization)() if status >= 300 else connection.read_all()
            )
        except BaseException:
            connection.close()
            raise
        self._release(origin, connection)
        return status, answer, connection.retry_after

    @contextlib.asynccontextmanager
    async def stream(
        self,
        url: str,
        body: bytes,
        authorization: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str], str | None]]:
        """POST ``body`` to ``url`` (with ``authorization`` as ``post``) for a streamed answer: its
        status, a reader of the start of its body (an error's, to quote, as ``post`` quotes it),
        its lines as they arrive (without line ends), and its ``Retry-After`` (``None`` without one).

        Raises as ``post``; reading the lines raises ``UpstreamError`` for a line over
        ``max_line`` bytes. Leaving before the answer is complete closes the connection.
        """
        origin, connection, status = await self._send(url, body, authorization, headers)
        try:
            yield (
                status,
                _error_start(connection, body, authorization),
                split_lines(connection.pieces(), self.max_line, UpstreamError),
                connection.retry_after,
            )
        except BaseException:
            connection.close()
            raise
        self._release(origin, connection)

    async def _send(
        self,
        url: str,
        body: bytes,
        authorization: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[tuple[str, int], _Connection, int]:
        """Send the request on an idle or new connection to ``url``'s origin: origin, connection
        and the answer's status (its body not yet read). Closes the connection if that fails; an
        idle one that failed before any byte of an answer arrived (the backend closed it for
        being idle) is left for a new connection, the request sent once more on that."""
        if (mark := SENDING.get()) is not None:
            mark.sent = True
        origin, head = self._head(url, authorization)
        if headers:  # the call's trace context (BackendClient): before Content-Length, which ends the head
            head = head.removesuffix(b"Content-Length: ") + _header_lines(headers) + b"Content-Length: "
        request = head + str(len(body)).encode() + b"\r\n\r\n" + body
        connection = self._take(origin)
        if connection is not None:
            try:
                return origin, connection, await connection.open(request)
            except UpstreamError:
                connection.close()
                if connection.heard:
                    raise
            except BaseException:
                connection.close()
                raise
        connection = await self._connect(origin)
        try:
            status = await connection.open(request)
        except BaseException:
            connection.close()
            raise
        return origin, connection, status

    async def aclose(self) -> None:
        """Close every idle connection; connections in use close when their call ends."""
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports finish closing

    def _head(self, url: str, authorization: str | None) -> tuple[tuple[str, int], bytes]:
        """The origin of ``url`` and the request's head up to the Content-Length value. Raises
        ``UpstreamError`` for a URL that is not plain http, or an ``authorization`` that is not
        printable ASCII (a line break would end the header); the message never holds it."""
        known = self._heads.get((url, authorization))
        if known is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise UpstreamError(f"the lean client speaks plain http only, not {url!r}")
            origin = (parts.hostname, parts.port or 80)
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            auth = ""
            if authorization is not None:
                if not all(" " <= c < "\x7f" for c in authorization):
                    raise UpstreamError("the Authorization value holds characters a header cannot carry")
                auth = f"Authorization: {authorization}\r\n"
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                f"Accept: application/json\r\nAccept-Encoding: identity\r\n{auth}Content-Length: "
            ).encode()
            known = self._heads[(url, authorization)] = (origin, head)
        return known

    def _take(self, origin: tuple[str, int]) -> _Connection | None:
        connections = self._idle.get(origin)
        now = time.monotonic()
        while connections:
            connection = connections.pop()
            if connection.usable and now - connection.idle_since < self.idle_s:
                return connection
            connection.close()
        return None

    def _release(self, origin: tuple[str, int], connection: _Connection) -> None:
        """Keep ``connection`` for the next call if its answer is complete and it may stay open."""
        if not connection.reusable() or self._closed:
            connection.close()
            return
        connections = self._idle.setdefault(origin, [])
        if len(connections) >= self.max_idle:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        connections.append(connection)

    async def _connect(self, origin: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.connect_s):
            _, connection = await loop.create_connection(_Connection, *origin)
        return connection


def _error_start(
    connection: _Connection, sent: bytes, authorization: str | None
) -> Callable[[], Awaitable[bytes]]:
    """The reader of what is quoted of ``connection``'s error answer to the request body ``sent``
    (sent with the ``Authorization`` header ``authorization``): the start of its body
    (``read_start``), or for a body sent with a ``Content-Encoding`` words that say so
    (``_not_decoded``), nothing of it read."""
    if _encoded(connection.encoding):
        mark = SENDING.get()
        request = mark.request if mark is not None else None
        return functools.partial(_not_decoded, connection.encoding, request, sent, authorization)
    return connection.read_start


async def _not_decoded(
    encoding: str, request: Mapping[str, Any] | None, sent: bytes, authorization: str | None
) -> bytes:
    """What is quoted of an error answer sent with the ``Content-Encoding`` ``encoding`` (as sent)
    to the request body ``sent``, as ``BackendClient`` quotes one on its own paths (``_quoted``):
    words that say so, whole: its bytes are not decoded (the pool asked for none, and decodes
    nothing), and as sent they say nothing. The header is scrubbed of the API key (the
    ``Bearer`` value of ``authorization``, as ``BackendClient`` writes it) and of the prompt
    before it is cut and escaped (``_encoding_shown``). The prompt is ``request``'s, the call's
    body as the gateway handed it to the dispatcher (``SendMark.request``), whose messages are
    those ``BackendClient`` wrote into ``sent``. Without it (the pool used on its own) it is read
    back from ``sent`` (a body that is no JSON object has no prompt to find) in a worker thread,
    off the event loop, though the parse holds the GIL while it runs. Until a regression review of
    R91 the gateway's calls too had ``sent`` parsed, on the loop: 0.24 s more of stall for a body
    of 150,000 messages. Until review R91 only a successful answer's encoding was heeded: an
    error's compressed bytes were quoted as its text (``HTTP 400: \x08\x00...``), where the
    aiohttp and httpx paths said ``(a body with Content-Encoding: gzip, not decoded)``."""
    if request is None:
        request = await asyncio.to_thread(_json_object, sent)
    key = authorization.removeprefix("Bearer ") if authorization is not None else None
    return _not_decoded_words(encoding, request, key)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """``raw`` read as JSON if it is an object, else ``None``."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _header_text(value: bytes) -> str:
    """A header's ``value`` as text, read as httpx reads it: UTF-8, else Latin-1 (which reads any
    bytes), so that an echo of a prompt sent in either is found as the prompt's text."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def _header_lines(headers: Mapping[str, str]) -> bytes:
    """``headers`` as request header lines; ``UpstreamError`` (quoting neither) for a name that is
    not a token or a value that is not printable ASCII (a line break would end the header)."""
    lines = []
    for name, value in headers.items():
        if not name or not all("!" <= c < "\x7f" and c not in '()<>@,;:\\"/[]?={}' for c in name):
            raise UpstreamError("a header name holds characters a header cannot carry")
        if not all(" " <= c < "\x7f" for c in value):
            raise UpstreamError("a header value holds characters a header cannot carry")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode()
