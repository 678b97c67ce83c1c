"""How a chat call reaches a backend besides the client's own pools: the ``ChatTransport`` a
caller (the gateway's lean pool) may set, what its ``post`` and ``stream`` return, and the W3C
trace context headers (``trace_headers``) a chat call carries (``agentgate.dispatch.backends``
says which, and why only those)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Protocol

from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_TRACE_CONTEXT = TraceContextTextMapPropagator()


def trace_headers(context: Context | None = None) -> dict[str, str]:
    """The W3C Trace Context headers of the span current in ``context`` (default: the current
    context): ``traceparent``, and ``tracestate`` when the trace carries one; empty when there is
    no valid span. Only W3C Trace Context, never ``baggage``: what a chat call sends a backend."""
    carrier: dict[str, str] = {}
    _TRACE_CONTEXT.inject(carrier, context)
    return carrier


class WholeBody(bytes):
    """An error answer's body known to be whole: what a reader of its start (``ChatTransport``'s
    ``post`` for a status of 300 or more, ``stream``'s reader) returns when the body ended within
    what it read. Plain ``bytes`` there are taken to be the body's start, cut at the read: of its
    last characters, what is not redacted and is a start of the prompt or the key, or a piece of
    the key 4 characters or longer, is not quoted (too short there to be recognised, ``_scrub``'s
    ``cut``). Until a regression review of R90 a body was
    taken as cut only when 1,024 bytes were read, and the first piece of a body sent in two writes
    quoted a prompt's start at its end (``HTTP 400: <pre> 078-05-``)."""

    __slots__ = ()


class EncodedAnswer(ConnectionError):
    """What a ``ChatTransport`` raises for a successful answer sent with a ``Content-Encoding``
    other than ``identity``: it asked for none, and does not decode it. ``encoding`` is the header
    as sent: the backend's words, which ``BackendClient`` quotes as it quotes a refused encoding
    on its own paths, scrubbed of the prompt before it is cut and escaped (``_encoding_shown``).
    Until a regression review of R90 the gateway's pool quoted 40 characters of it, escaped, in
    an ``UpstreamError``, and the prompt was scrubbed from that: an echo holding a character past
    ASCII (``\\xe9``) was redacted only up to it, and a prompt's start at the cut was quoted."""

    def __init__(self, message: str, encoding: str) -> None:
        super().__init__(message)
        self.encoding = encoding


PostAnswer = tuple[int, bytes] | tuple[int, bytes, str | None]
"""What a ``ChatTransport``'s ``post`` returns: status, body, and optionally ``Retry-After``."""
StreamAnswer = (
    tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str]]
    | tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str], str | None]
)
"""What a ``ChatTransport``'s ``stream`` opens with: status, a reader of the body's start, the
lines, and optionally ``Retry-After``."""


class ChatTransport(Protocol):
    """What chat calls can go over instead of ``session`` (the gateway's lean pool).
    ``authorization``, when given, is sent as the ``Authorization`` header's value.

    A transport whose ``post`` and ``stream`` also take a keyword ``headers`` (a mapping of
    further header names to values, or ``None``) is given the call's trace context headers
    (``trace_headers``) there; one that does not take it is called as above, and sends none."""

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> PostAnswer:
        """POST the JSON ``body``: the status and the whole answer (for a status of 300 or more,
        its body's start may do: its first 1,088 bytes (``_QUOTED``, 1,024, and the
        ``_READ_PAST_THE_CUT``, 64, after them) where it has that many, or fewer only where no
        more has arrived: the first 1,024 are quoted, and the 64 after them scrubbed with them so
        that an echo of the key or the prompt standing across the cut is redacted whole; a
        ``WholeBody`` where the body is known to have ended there, else it is taken as cut (its
        end, where a start of the key or the prompt or a piece of the key 4 characters or
        longer stands, left out: until a regression review of R91b a transport returning the
        first 1,024 bytes, as this said would do, had an inner piece of the key at the cut
        quoted); for an error
        answer sent with a ``Content-Encoding`` other than ``identity``, which is not decoded,
        the transport's own words instead, a ``WholeBody``: the gateway's pool says ``(a body
        with Content-Encoding: gzip, not decoded)`` as ``BackendClient`` says it on its own
        paths, the header scrubbed of the prompt and the API key before it is cut), and, as a third
        item, the answer's ``Retry-After`` header (``None`` without one; a transport that gives
        no third item is taken to have none); raises ``OSError`` if none can be read
        (``EncodedAnswer`` for a successful answer with a ``Content-Encoding``), and
        ``agentgate.errors.AnswerTooLarge`` for a successful answer over
        ``backends.MAX_ANSWER_BYTES`` (the call's doing, not a failure of the backend's)."""
        ...

    def stream(
        self, url: str, body: bytes, authorization: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[StreamAnswer]:
        """POST the JSON ``body`` for a streamed answer: the status, a reader of its body (called
        only for an error status, to quote the body's first ``_QUOTED`` bytes: it returns its
        first 1,088 bytes, or just what has arrived of them, as ``post``, a ``WholeBody`` where
        that is all of it, or for an encoded body the transport's own words, as ``post``), its
        lines, and, as a
        fourth item, its ``Retry-After`` header
        (optional, as ``post``'s third); raises ``OSError`` if the answer cannot be read."""
        ...


class _HeaderTransport(Protocol):
    """A ``ChatTransport`` that also sends further headers (the call's trace context)."""

    async def post(
        self,
        url: str,
        body: bytes,
        authorization: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> PostAnswer: ...

    def stream(
        self,
        url: str,
        body: bytes,
        authorization: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> contextlib.AbstractAsyncContextManager[StreamAnswer]: ...


def _takes_headers(method: object) -> bool:
    """Whether ``method`` (a transport's ``post`` or ``stream``) takes a keyword ``headers``."""
    if not callable(method):
        return False
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): called without headers
        return False
    found = parameters.get("headers")
    return found is not None and found.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
