"""Async HTTP clients for OpenAI-compatible inference backends: chat, streaming, metrics, health.

One pooled ``httpx.AsyncClient`` serves every backend; chat calls (streamed or not) go over a pooled
``aiohttp.ClientSession`` when the client is given one (the dispatcher does: aiohttp takes about
1 ms less per call than httpx's async client). Whatever goes wrong below this module
(refused connection, timeout, a connection cut mid-stream, an HTTP error, bytes that are not the
JSON or SSE promised) surfaces as ``BackendFailed``, which the dispatcher answers by failing
over; a 4xx that says the request itself is bad surfaces as ``RequestRejected`` (a ``DispatchError``)
and is not retried.
A 401 or 403 is about agentgate's credentials, not the caller's request: it surfaces as
``BackendRejectedCredentials`` (a ``BackendFailed``).

A backend with an API key (``Backend.api_key``) gets ``Authorization: Bearer <key>`` on every
chat call, and on its health probe and metrics scrape when they go to the origin (scheme, host,
port) of its ``url``; never to another origin. Nothing the caller sent but the JSON body reaches
a backend (no header of the caller's, so never the caller's own ``Authorization``). The key is
never part of an error message: text a backend sends back is scrubbed of it.

Every chat call carries the W3C trace context of the span current when it is sent (``chat``:
the ``trace_context`` given, else the current one): ``traceparent``, and ``tracestate`` when the
trace has one, so that an inference server started with OpenTelemetry tracing (vLLM and SGLang
with ``--otlp-traces-endpoint``) records its span of the request as a child of the model call's.
Only those two headers (``trace_headers``): never ``baggage``, which is the application's own
data, whatever propagators the application installed. No span (or an invalid one): no header.
A ``ChatTransport`` gets them only when its ``post`` and ``stream`` take a ``headers`` keyword.

The client is here; the parts it is made of are beside it, one subject each, and the public
ones are exported from here: ``_answers`` (``Usage``, ``ChatChunk``, ``ChatResult`` and the
readers of usage, finish reasons and errors reported with HTTP 200), ``_sse`` (a stream's
lines and chunks, ``split_lines``), ``_transport`` (``ChatTransport``, ``trace_headers``),
``_redaction`` (the key and the prompt scrubbed from a backend's words) and ``_retry_after``
(``retry_after_s``).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from typing import Any, TypeGuard, cast

import aiohttp
import httpx
import orjson
from opentelemetry.context import Context

from agentgate._http_limits import declared_length
from agentgate._numbers import LEAST_DECODE_RATE, check_positive_finite
from agentgate._shown import bounded, escaped, quoted
from agentgate.dispatch._answers import (
    MAX_USAGE_TOKENS,
    ChatChunk,
    ChatResult,
    Usage,
    _reject_error,
    _usage,
    output_limit,
)
from agentgate.dispatch._connector import posted
from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch._redaction import (
    _SEEN_PAST_THE_CUT,
    _cut_whole,
    _prompt_texts,
    _scrub,
    _scrub_start,
)
from agentgate.dispatch._retry_after import MAX_RETRY_AFTER_S, retry_after_s
from agentgate.dispatch._sse import (
    _SSE_IGNORED,
    MAX_CHARS_PER_TOKEN,
    MAX_LINE_BYTES,
    _advances,
    _answer_chars,
    _answer_limit,
    _checked_choices,
    _content,
    _line_shown,
    _parse_chunk,
    _Seen,
    _within_depth,
    carries_output,
    split_lines,
)
from agentgate.dispatch._transport import (
    ChatTransport,
    EncodedAnswer,
    PostAnswer,
    StreamAnswer,
    WholeBody,
    _HeaderTransport,
    _takes_headers,
    trace_headers,
)
from agentgate.dispatch.inventory import Backend, origin
from agentgate.dispatch.metrics import MAX_METRICS_CHARS, EngineLoad, load_from_text
from agentgate.errors import (
    AnswerTooLarge,
    BackendCredentialError,
    BackendFailed,
    BackendRejectedCredentials,
    DispatchError,
    InputError,
    RequestRejected,
    UsageUnreadable,
)

__all__ = [
    "DEFAULT_OUTPUT_TOKENS",
    "MAX_ANSWER_BYTES",
    "MAX_CHARS_PER_TOKEN",
    "MAX_LINE_BYTES",
    "MAX_RETRY_AFTER_S",
    "MAX_USAGE_TOKENS",
    "BackendClient",
    "ChatChunk",
    "ChatResult",
    "ChatTransport",
    "EncodedAnswer",
    "PostAnswer",
    "StreamAnswer",
    "Timeouts",
    "Usage",
    "WholeBody",
    "carries_output",
    "output_limit",
    "retry_after_s",
    "split_lines",
    "trace_headers",
]

_CALLER_ERRORS = frozenset({400, 413, 422})
_CREDENTIAL_ERRORS = frozenset({401, 403})
_BUSY = frozenset({429, 503})
"""The statuses whose ``Retry-After`` is read (``retry_after_s``): too many requests, unavailable."""
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest non-streamed answer read (as sent: an encoded one is refused, ``_IDENTITY``): a
chat completion with every token's log-probabilities is a few MB. A larger one is ``AnswerTooLarge``: the call's own doing
(tens of thousands of tokens each with 20 log-probabilities, or a long prompt's
``prompt_logprobs``), not the backend's failure."""
DEFAULT_OUTPUT_TOKENS = 256
"""The output limit taken for a call that names none (``max_completion_tokens``, ``max_tokens``):
what the router predicts it for, and what its non-streamed answer is waited for (``Timeouts.answer_s``)."""
_SMALL = 1 << 16
"""An answer of at most this many bytes, not compressed, is read in one go."""
_QUOTED = 1024
"""The most bytes of an error answer's body that are quoted (``_excerpt``): a streamed call reads
no more of it than has arrived once any has (``_post_stream``)."""
_READ_PAST_THE_CUT = 4 * _SEEN_PAST_THE_CUT
"""How many bytes of an error answer's body past its first ``_QUOTED`` are read (``_start``,
``_read_start``) and scrubbed, never quoted (``_excerpt``): ``_SEEN_PAST_THE_CUT`` characters of
up to 4 bytes each, so an echo of the key or a prompt standing across the cut is redacted whole."""
_UTF_8 = codecs.getincrementaldecoder("utf-8")
"""Decodes the start of a body cut at the read (``_excerpt``): not ``final``, it holds back the
bytes of a character cut in two at the end, where ``bytes.decode`` writes U+FFFD for them."""
_IDENTITY = {"accept-encoding": "identity"}
"""Asked of a backend with every request: its answer as sent, never compressed. aiohttp and httpx
unpack each network read whole before any bound here applies (until review R67 128 KiB of gzip
were 128 MiB in memory at once), so an answer with another ``Content-Encoding`` is refused
(``_refuse_encoded``), its body never decoded."""
_JSON = {"content-type": "application/json", **_IDENTITY}


def _refuse_declared(length: str | None) -> int | None:
    """The bytes a successful answer's ``Content-Length`` (``length``, as sent; ``None`` without
    one) declares (``None`` for none, or one that is no length); raises ``AnswerTooLarge`` for
    more than ``MAX_ANSWER_BYTES``, at its head, before any of its body is read: the declared
    length decides it, as the gateway's pool decides it (``_upstream``). Until review R58 the dispatcher's own clients read up to the limit first
    (64 MiB, or until ``first_token_s`` of a body held back), and a body cut short before the
    limit was a ``BackendFailed``: retried on other backends, each marked down. The length is
    read as the gateway's pool reads it (``declared_length``): until review R88 a length after
    more than 4,300 leading zeros was a bare ``ValueError`` here."""
    declared = None if length is None else declared_length(length)
    if declared is not None and declared > MAX_ANSWER_BYTES:
        raise AnswerTooLarge(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    return declared


_QUOTED_HEADER = 640
"""How much of a refused ``Content-Encoding`` is scrubbed of the key and the prompt (with
``_SEEN_PAST_THE_CUT`` characters more read), as Latin-1 where it is not UTF-8
(``_latin_1_where_not_utf_8``), before the first 40 characters of what that writes are quoted
(``_encoding_shown``, ``_scrub_start``)."""


def _refuse_encoded(
    name: str, encoding: str | None, request: Mapping[str, Any] | None = None, key: str | None = None
) -> None:
    """Raise ``BackendFailed`` naming backend ``name`` for an answer whose ``Content-Encoding``
    header (``encoding``, as sent; ``None`` without one) is other than ``identity``: it was asked
    for none (``_IDENTITY``), and is not decoded (a few kB of gzip may unpack to gigabytes).

    The header is the backend's words: it is quoted scrubbed of ``key`` (the backend's API key,
    ``None`` without one) and of the prompt of ``request`` (``_prompt_texts``; the call's body,
    ``None`` for a call without one), as it came, before it is cut or escaped; only when it is
    refused, so an answer that is taken pays nothing. Until a regression review of R89 it was
    quoted as sent, and a backend echoing the prompt there put it in the failure (the prompt was
    scrubbed from the whole message before, in ``_shown``)."""
    if _encoded(encoding):
        raise BackendFailed(f"{name}: {_encoding_refused(encoding, request, key)}")


def _encoding_refused(encoding: str, request: Mapping[str, Any] | None, key: str | None = None) -> str:
    """Why an answer with the ``Content-Encoding`` ``encoding`` (as sent) is refused, the header
    quoted as ``_encoding_shown`` quotes it: on every client path, a transport's too
    (``EncodedAnswer``, ``_failure_text``)."""
    return (
        f"answered with Content-Encoding: {_encoding_shown(encoding, request, key)}, which it was not "
        "asked for (Accept-Encoding: identity): not decoded"
    )


def _encoding_shown(encoding: str, request: Mapping[str, Any] | None, key: str | None = None) -> str:
    """A ``Content-Encoding`` header (``encoding``, as sent) as a message quotes it: scrubbed of
    ``key`` and of the prompt of ``request`` (``_prompt_texts``; ``None``: a call without one)
    as it came, then its first 40 characters on one line, each that is not printable written as
    its escape (``escaped``: a lone surrogate, which no text encoder takes, as ``\\udcff``). A
    header whose bytes are not UTF-8, which aiohttp keeps as lone surrogates, is read first as
    httpx and the gateway's pool read it, as Latin-1: until a regression review of R90 an echo
    holding ``é`` sent as Latin-1 was looked for as aiohttp kept it, a surrogate where the prompt
    has ``é``, so it was redacted only up to it and the rest of the prompt quoted. Until review
    R91 the key was scrubbed after the cut, from the message (``_excerpt``, ``_shown``): a start
    of it shorter than 8 characters standing at the cut, or a piece shorter than 16, was quoted.
    The 40 characters are cut from what the scrub wrote of the header's first 640 characters,
    read with 16 past them (``_scrub_start``), so an echo across that cut is redacted whole, and a
    marker standing across the cut of 40 is kept whole (``_cut_whole``): until a regression review
    of R91 the 640 were scrubbed as cut there, and where a long echo of the prompt before shrank
    to one marker, the end of those 640 came within the 40 quoted, with an inner piece of the key
    cut there; until one of R91b only what stood in the header's first 40 characters was written,
    and the name of the encoding after a long echo was lost (``[redacted]``, not
    ``[redacted], gzip``)."""
    said = _latin_1_where_not_utf_8(encoding[: _QUOTED_HEADER + _SEEN_PAST_THE_CUT])
    if request is not None or key:
        said = _scrub_start(said, key, _prompt_texts(request), _QUOTED_HEADER)
    return escaped(_cut_whole(said, 40))


def _latin_1_where_not_utf_8(header: str) -> str:
    """``header`` read as Latin-1 where aiohttp found its bytes not UTF-8 (it keeps each byte that
    is not as a lone surrogate), as httpx reads such a header; else as it stands."""
    try:
        header.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return header.encode("utf-8", "surrogateescape").decode("latin-1")
        except UnicodeEncodeError:  # a surrogate that stands for no byte: not aiohttp's
            return header
    return header


def _encoded(encoding: str | None) -> TypeGuard[str]:
    """Whether an answer's ``Content-Encoding`` (``encoding``) is other than ``identity``."""
    return encoding is not None and encoding.strip().lower() not in ("", "identity")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a backend may take (seconds). Raises ``InputError`` for a limit that is not
    positive and finite (zero would fail every call; NaN or infinity would never fire), and for a
    ``decode_tokens_per_s`` under ``LEAST_DECODE_RATE`` (0.001, as ``agentgate serve`` takes it):
    until a regression review of R89 ``1e-320`` was taken, and a stream's deadline in all
    (``stream_s``) was infinite."""

    connect_s: float = 2.0
    """To open a connection."""
    first_token_s: float = 60.0
    """From sending the request to the first token of a stream (the caller's time holding a chunk
    before it not counted); the part of a non-streamed answer's deadline before its decode
    (``answer_s``)."""
    idle_s: float = 30.0
    """Between two chunks of a stream (the caller's time holding one not counted)."""
    probe_s: float = 1.0
    """For a health check or a metrics scrape."""
    decode_tokens_per_s: float = 5.0
    """The slowest decode (tokens per second of one answer) an answer is waited for at, whole
    (``answer_s``) or streamed (``stream_s``): well under what an engine decodes one sequence at even in a full batch (tens of tokens
    per second), so that only a backend that is stuck misses it."""
    answer_max_s: float = 1800.0
    """The most a non-streamed answer is waited for, whatever its output limit (``answer_s``):
    30 minutes, 54,000 tokens at 30 a second. An answer that may take longer is one to stream,
    whose deadlines are per chunk and, in all, ``stream_s``, at least this."""

    def answer_s(self, payload: Mapping[str, Any]) -> float:
        """The deadline of a non-streamed answer to ``payload``, which comes whole, after its last
        token: ``first_token_s`` plus its output limit (``max_completion_tokens``, else
        ``max_tokens``, read by ``output_limit``, which raises ``DispatchError`` for one that is no
        whole number; ``DEFAULT_OUTPUT_TOKENS`` when it names none) decoded at
        ``decode_tokens_per_s``. Until review R58 it was ``first_token_s`` alone: an answer that
        took longer to generate (a few thousand tokens at 30 a second) was a ``BackendFailed``,
        sent again to each of three backends, and each marked down. At most ``answer_max_s``:
        until review R61 a backend that accepted the call and never answered held a call with
        ``max_tokens`` 131072 for 7.3 hours, one with a billion for six years, per attempt."""
        tokens = output_limit(payload) or DEFAULT_OUTPUT_TOKENS  # as the router takes it
        return min(self.answer_max_s, self.first_token_s + tokens / self.decode_tokens_per_s)

    def stream_s(self, payload: Mapping[str, Any]) -> float:
        """The most time a stream for ``payload`` may spend waiting on its backend, in all (its
        head and every line; not the caller's time between chunks): ``first_token_s`` plus its
        output limit (``output_limit``) decoded at ``decode_tokens_per_s``, as long as the slowest
        honest engine takes to send it whole, and never less than ``answer_max_s`` (all of it for
        a call that names no limit, whose length only the backend knows). Until review R61 a
        stream had deadlines per chunk only: a backend dripping a character a chunk, each within
        ``idle_s``, held a call of ``max_tokens`` 4096 for its 4,194,304 characters
        (``MAX_CHARS_PER_TOKEN`` a token), at 29 s a chunk 3.9 years."""
        tokens = output_limit(payload)
        if tokens is None:
            return self.answer_max_s
        return max(self.answer_max_s, self.first_token_s + tokens / self.decode_tokens_per_s)

    def __post_init__(self) -> None:
        for name in (
            "connect_s",
            "first_token_s",
            "idle_s",
            "probe_s",
            "decode_tokens_per_s",
            "answer_max_s",
        ):
            check_positive_finite(getattr(self, name), f"timeout {name}")
        if self.decode_tokens_per_s < LEAST_DECODE_RATE:
            raise InputError(
                f"timeout decode_tokens_per_s must be at least {LEAST_DECODE_RATE:g} tokens a second "
                f"(a slower one puts a stream's deadline past any timer), got {quoted(self.decode_tokens_per_s)}"
            )


def _choices_asked(payload: Mapping[str, Any]) -> int:
    """How many choices ``payload`` asks for: its ``n`` when a whole number of at least 1 (the
    backend refuses any other), else 1."""
    n = payload.get("n")
    return n if type(n) is int and n >= 1 else 1


class BackendClient:
    """Talks to one backend over a shared, pooled ``httpx.AsyncClient`` (and ``session``, if given,
    for chat calls; ``transport``, if set, instead of both)."""

    def __init__(
        self,
        backend: Backend,
        http: httpx.AsyncClient,
        timeouts: Timeouts | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.backend = backend
        self.http = http
        self.session = session
        self.transport: ChatTransport | None = None
        self.timeouts = timeouts or Timeouts()
        # A stream's deadlines are its own (``stream``: ``first_token_s`` for the head and the
        # first chunk, ``idle_s`` after it); the transport's read timeout only backs them up, so
        # it is the longer of the two, and never fires before either. Until review R89 it was
        # ``idle_s``, which also ran from the head to the first token: a first token slower than
        # ``idle_s`` (30 s) but within ``first_token_s`` (60 s) failed the stream, and over
        # aiohttp was said to be silence for ``first_token_s``.
        stream_read_s = max(self.timeouts.first_token_s, self.timeouts.idle_s)
        self._stream_session_timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timeouts.connect_s, sock_read=stream_read_s
        )
        # Built once: the same limits for every request of a kind (a non-streamed answer's are
        # its own: ``Timeouts.answer_s``).
        self._stream_timeout = self._timeout(stream_read_s)
        self._probe_timeout = self._timeout(self.timeouts.probe_s)
        self._reading: set[aiohttp.ClientResponse] = set()
        """The answers whose bodies are being read over ``session`` now (``cut``)."""
        self._headers_checked: tuple[ChatTransport | None, bool] = (None, False)
        """The transport last checked by ``_transport_headers``, and whether it takes ``headers``."""
        key = backend.api_key
        self._use_key(key.get_secret_value() if key is not None else None)

    def _use_key(self, key: str | None) -> None:
        """Send ``key`` (None: no key) from now on: on chat calls, probes and same-origin scrapes."""
        backend = self.backend
        self._key = key
        self._authorization = f"Bearer {key}" if key is not None else None
        auth = {"Authorization": self._authorization} if self._authorization is not None else {}
        self._chat_headers = {**_JSON, **auth}
        self._probe_headers = {**_IDENTITY, **auth}  # /health is on the origin of ``url``
        same_origin = backend.metrics_url is not None and origin(backend.metrics_url) == origin(backend.url)
        self._metrics_headers = {**_IDENTITY, **auth} if same_origin else _IDENTITY

    def reload_key(self) -> bool:
        """Read the backend's API key again from its source (``Backend.read_api_key``: a key file
        rotated since it was read) and send the key found from now on; True if it changed. A
        source that cannot be read now, or holds no usable key, leaves the key in use (False):
        the inventory was checked when it was loaded."""
        try:
            key = self.backend.read_api_key()
        except BackendCredentialError:
            return False
        value = key.get_secret_value() if key is not None else None
        if value == self._key:
            return False
        self._use_key(value)
        return True

    def _timeout(self, read: float) -> httpx.Timeout:
        return httpx.Timeout(
            connect=self.timeouts.connect_s, read=read, write=read, pool=self.timeouts.connect_s
        )

    def _transport_headers(self, transport: ChatTransport) -> bool:
        """Whether ``transport``'s ``post`` and ``stream`` take a ``headers`` keyword (checked once
        per transport set)."""
        checked, takes = self._headers_checked
        if checked is not transport:
            takes = all(_takes_headers(getattr(transport, name, None)) for name in ("post", "stream"))
            self._headers_checked = (transport, takes)
        return takes

    def _with_trace(self, headers: dict[str, str], trace: Mapping[str, str]) -> dict[str, str]:
        return {**headers, **trace} if trace else headers

    async def chat(self, payload: Mapping[str, Any], *, trace_context: Context | None = None) -> ChatResult:
        """POST a non-streaming chat completion, with the trace context headers of the span current
        in ``trace_context`` (default: the current context; see the module docstring).

        Raises ``AnswerTooLarge`` for a successful answer over ``MAX_ANSWER_BYTES`` (the call asked
        for that much: not the backend's failure; until review R57 a ``BackendFailed``, which the
        dispatcher retried on other backends, each marked down, the call released);
        ``BackendFailed`` on any transport failure, timeout, redirect, 5xx/429, an error
        reported with HTTP 200 (``_reject_error``) or a malformed body (a body that is not JSON, a
        choice that is not an object with a message object, any choice whose content is neither a string, null nor absent, a ``finish_reason`` that is not a string, usage that is
        not counts: see ``_usage``); ``RequestRejected`` when the backend rejects the request as
        invalid (400, 422, ...); ``BackendRejectedCredentials`` for 401/403; ``FieldError`` before
        anything is sent for a payload value JSON cannot write (``_encode``). No message holds the
        backend's key (``_shown``).
        """
        try:
            return await self._chat(payload, trace_headers(trace_context))
        except DispatchError as exc:
            error = self._shown(exc)
        raise error  # outside the handler: nothing chained to it

    async def _chat(self, payload: Mapping[str, Any], trace: Mapping[str, str]) -> ChatResult:
        content = _encode({**payload, "stream": False})
        deadline = self.timeouts.answer_s(payload)
        try:
            async with asyncio.timeout(deadline):
                status, raw, retry_after = await self._post(content, trace, deadline, payload)
        except TimeoutError:
            raise BackendFailed(f"{self.backend.name}: no answer within {deadline:g}s") from None
        except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
            raise BackendFailed(f"{self.backend.name}: {_failure_text(exc, payload, self._key)}") from None
        except AnswerTooLarge as exc:  # from ``_capped``, or the transport's (the gateway's pool)
            raise AnswerTooLarge(
                f"{self.backend.name}: {exc}: the call asked for more than is read "
                "(fewer tokens, or fewer log-probabilities)"
            ) from None
        # Quoted for an error only, as a stream's head is: a success's body is no message, and
        # redacting the prompt from it (``_excerpt``) cost every answer up to a millisecond on the
        # event loop until a regression review of R89.
        self._check_status(status, self._excerpt(raw, payload) if status >= 300 else "", retry_after)
        try:
            data = orjson.loads(raw)
            # Nested past ``MAX_DEPTH``, as a stream event is (``_within_depth``): orjson reads
            # 1,024 levels, and until review R88d an answer 1,000 deep was a bare RecursionError
            # out of a refusal quoting its finish_reason, usage or choice index.
            _within_depth(data)
            _reject_error(self.backend.name, data, self._key, payload)
            choices = _checked_choices(
                data["choices"], "message", _choices_asked(payload), payload, self._key
            )
            choice = choices[0]
            # No ``content`` key is none: TGI's tool call message has ``role`` and ``tool_calls``
            # only (until review R66 such an answer was a BackendFailed, sent to every backend).
            # Absent or null alone: until review R88 a falsy content that is no text (``false``,
            # ``0``, ``[]``, ``{}``) was read as the empty answer, and passed on in the body. Every
            # choice's content is checked (``_checked_choices``): the gateway passes them all on.
            text = _content(choice["message"])
            reason = choice.get("finish_reason")  # checked with the others (``_checked_choices``)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BackendFailed(f"{self.backend.name}: malformed chat completion: {exc}") from None
        try:
            usage = _usage(data.get("usage"), payload, self._key)
        except ValueError as exc:
            # The answer is whole: the call ran. Until review R68 this was a plain BackendFailed:
            # the dispatcher sent the call to the next backend, which ran it again, and the Gate
            # and the gateway released its reservation (a hostile usage made each call free).
            raise UsageUnreadable(f"{self.backend.name}: malformed chat completion: {exc}") from None
        return ChatResult(self.backend.name, text, reason, usage, data, raw)

    async def _post(
        self, content: bytes, trace: Mapping[str, str], deadline: float, payload: Mapping[str, Any]
    ) -> tuple[int, bytes, str | None]:
        """POST ``content`` (``payload`` encoded, whose prompt a refused encoding is scrubbed of:
        ``_refuse_encoded``) to the chat endpoint (with the ``trace`` headers), its answer read
        within ``deadline`` seconds (``Timeouts.answer_s``): the status and the
        whole body (redirects not followed), or for a status of 300 or more what has arrived of
        the body once any has, at most ``_QUOTED`` bytes and the ``_READ_PAST_THE_CUT`` after them
        (an error's body is quoted, never waited for or held whole), and the answer's ``Retry-After`` (``None`` without one); raises
        ``AnswerTooLarge`` for a body over ``MAX_ANSWER_BYTES``, at the head for one whose
        ``Content-Length`` declares more (``_refuse_declared``)."""
        if self.transport is not None:
            if trace and self._transport_headers(self.transport):
                traced = cast(_HeaderTransport, self.transport)
                got = await traced.post(self.backend.chat_url, content, self._authorization, headers=trace)
            else:
                got = await self.transport.post(self.backend.chat_url, content, self._authorization)
            return got[0], got[1], got[2] if len(got) > 2 else None
        headers = self._with_trace(self._chat_headers, trace)
        if self.session is not None:
            async with await posted(
                self.session,
                self.backend.chat_url,
                data=content,
                headers=headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self.timeouts.connect_s, sock_read=deadline
                ),
                allow_redirects=False,
                auto_decompress=False,  # an encoded answer is refused, never unpacked (``_IDENTITY``)
            ) as answer:
                self._reading.add(answer)
                try:
                    encoding = answer.headers.get("Content-Encoding")
                    if answer.status >= 300:
                        retry_after = answer.headers.get("Retry-After")
                        return (
                            answer.status,
                            await _quoted(
                                functools.partial(_read_start, answer), encoding, payload, self._key
                            ),
                            retry_after,
                        )
                    _refuse_encoded(self.backend.name, encoding, payload, self._key)
                    # The header as sent, not aiohttp's ``content_length`` (its own ``int``).
                    declared = _refuse_declared(answer.headers.get("Content-Length"))
                    small = declared is not None and declared <= _SMALL
                    if small:
                        return answer.status, await answer.read(), None  # the usual answer: a few kB
                    return answer.status, await self._capped(answer.content.iter_chunked(1 << 20)), None
                finally:
                    self._reading.discard(answer)
        async with self.http.stream(
            "POST",
            self.backend.chat_url,
            content=content,
            headers=headers,
            timeout=self._timeout(deadline),
        ) as response:
            encoding = response.headers.get("Content-Encoding")
            if response.status_code >= 300:
                quoted = await _quoted(functools.partial(_start, response), encoding, payload, self._key)
                return response.status_code, quoted, response.headers.get("Retry-After")
            _refuse_encoded(self.backend.name, encoding, payload, self._key)
            _refuse_declared(response.headers.get("Content-Length"))
            # Raw: httpx would unpack each read whole (an encoded answer is refused above).
            return response.status_code, await self._capped(response.aiter_raw()), None

    async def _capped(self, chunks: AsyncIterator[bytes]) -> bytes:
        """The body, read up to ``MAX_ANSWER_BYTES`` (as sent: an encoded answer is refused before
        it comes here, ``_refuse_encoded``); raises ``AnswerTooLarge`` once it is larger."""
        parts: list[bytes] = []
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise AnswerTooLarge(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
            parts.append(chunk)
        return b"".join(parts)

    async def stream(
        self, payload: Mapping[str, Any], *, trace_context: Context | None = None
    ) -> AsyncIterator[ChatChunk]:
        """POST a streaming chat completion and yield its chunks until ``[DONE]``, with the trace
        context headers of the span current in ``trace_context`` (default: the context current
        where the stream is first read, when the request is sent).

        Raises ``BackendFailed`` on transport failure, no chunk within ``first_token_s`` of the
        request or within ``idle_s`` of the previous chunk (lines that carry no chunk, such as
        keep-alive comments, do not count, nor do chunks that carry nothing, nor a finish reason or
        usage said again: ``_advances``; nor does the caller's time holding a chunk yielded), a
        stream that has taken ``Timeouts.stream_s`` of the backend's time in all (a backend
        dripping a character a chunk), a stream that ends without ``[DONE]``, an error event (``_reject_error``), or an event that
        is malformed (not JSON, nested too deeply, or fields of the wrong kind, as ``chat``
        refuses them); raises as ``chat`` for an HTTP error status or a payload JSON cannot write.
        No message holds the backend's key. Closing the iterator cancels the request (the
        connection is closed).
        """
        body = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        trace = trace_headers(trace_context)
        loop = asyncio.get_running_loop()
        wait = self.timeouts.first_token_s
        # A deadline per chunk, not per line: comments, other SSE fields, events without a chunk
        # and chunks that carry nothing (keep-alive chatter) do not push it out, so a backend that
        # chatters forever without producing output still fails in time.
        deadline = loop.time() + wait
        limit = _answer_limit(payload)
        asked = _choices_asked(payload)
        # The backend's time in all (``stream_s``): a backend dripping a character a chunk pushes
        # ``deadline`` out with each, and only this ends it. The caller's time between chunks is
        # not counted: a slow reader is not the backend's doing.
        whole = self.timeouts.stream_s(payload)
        left = whole
        produced = 0
        seen = _Seen()
        try:
            async with contextlib.AsyncExitStack() as opened:
                # The answer's head (and an error's body) come under the first chunk's deadline
                # too: a backend that accepts the connection and never answers must not hold the
                # call, its slot and its reservation for ever (the lean pool has no timer of its own).
                waited = loop.time()
                try:
                    async with asyncio.timeout_at(min(deadline, waited + left)):
                        status, read, lines, retry_after = await opened.enter_async_context(
                            self._post_stream(body, trace)
                        )
                        # The start only: an error's body may never end (``_post_stream``).
                        refusal = self._excerpt(await read(), payload) if status >= 300 else ""
                except TimeoutError:
                    if waited + left < deadline:
                        raise self._overlong(whole) from None
                    raise BackendFailed(f"{self.backend.name}: no answer within {wait}s") from None
                left -= loop.time() - waited
                self._check_status(status, refusal, retry_after)
                first = True
                started = False  # a chunk has come that advanced the answer: ``idle_s`` from now on
                while True:
                    waited = loop.time()
                    try:
                        async with asyncio.timeout_at(min(deadline, waited + left)):
                            line = await anext(lines)
                    except StopAsyncIteration:
                        raise BackendFailed(f"{self.backend.name}: stream ended without [DONE]") from None
                    except TimeoutError:
                        if waited + left < deadline:
                            raise self._overlong(whole) from None
                        raise self._silent(started) from None
                    left -= loop.time() - waited
                    if first:
                        # The SSE format lets a stream open with a byte order mark, which belongs
                        # to no line: the first event after it was refused as not SSE.
                        line, first = line.removeprefix("\ufeff"), False
                    if not line or line.startswith(_SSE_IGNORED):
                        continue  # a comment, or an SSE field other than data (event, id, retry)
                    if not line.startswith("data:"):
                        shown = _line_shown(line, self._key, _prompt_texts(payload))
                        raise BackendFailed(f"{self.backend.name}: not an SSE event: {shown}")
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    chunk = _parse_chunk(self.backend.name, data, self._key, asked, payload)
                    if chunk is not None:
                        chars = _answer_chars(chunk)
                        if limit is not None and (produced := produced + chars) > limit:
                            raise BackendFailed(
                                f"{self.backend.name}: streamed over {limit} characters for a call "
                                f"of max_tokens {limit // MAX_CHARS_PER_TOKEN}: it ignores max_tokens"
                            )
                        held = loop.time()
                        yield chunk
                        # The caller's time holding the chunk is not the backend's, for the next
                        # chunk's deadline as for ``left``: until review R90 a chunk that does not
                        # advance the answer (vLLM's opening role-only one) left the deadline
                        # running while a slow reader held it, and a token that came at 0.3 s
                        # failed as "no first token within 1s", the backend marked down.
                        deadline += loop.time() - held
                        if _advances(chunk, seen, chars):
                            started = True
                            deadline = loop.time() + self.timeouts.idle_s
        except (httpx.HTTPError, aiohttp.ClientError, ValueError, OSError) as exc:
            # ValueError: a line over its limit (``split_lines``).
            error = self._shown(
                BackendFailed(f"{self.backend.name}: {_failure_text(exc, payload, self._key)}")
            )
        except DispatchError as exc:
            error = self._shown(exc)
        raise error  # outside the handlers: nothing chained to it

    def _silent(self, started: bool) -> BackendFailed:
        """The failure of a stream whose next chunk did not come in time: its first (or its head)
        within ``first_token_s`` of the request, or, once one has (``started``), a later one
        within ``idle_s`` of the last; each named, as the setting to change is."""
        if started:
            return BackendFailed(
                f"{self.backend.name}: stream silent for {self.timeouts.idle_s:g}s after its last "
                "chunk (idle_s)"
            )
        return BackendFailed(
            f"{self.backend.name}: no first token within {self.timeouts.first_token_s:g}s of the "
            "request (first_token_s)"
        )

    def _overlong(self, whole: float) -> BackendFailed:
        """The failure of a stream that has taken its backend's time in all (``stream_s``)."""
        return BackendFailed(
            f"{self.backend.name}: stream not done within {whole:g}s (its output limit at "
            f"{self.timeouts.decode_tokens_per_s:g} tokens a second, at least answer_max_s)"
        )

    @contextlib.asynccontextmanager
    async def _post_stream(
        self, body: Mapping[str, Any], trace: Mapping[str, str]
    ) -> AsyncIterator[tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str], str | None]]:
        """POST a streaming request (with the ``trace`` headers): the status, a reader of the start
        of the body (what has arrived of it once any has, at most ``_QUOTED`` bytes and the
        ``_READ_PAST_THE_CUT`` after them: an error
        answer's body is quoted, never waited for or held whole), its lines, and its
        ``Retry-After`` (``None`` without one)."""
        if self.transport is not None:
            if trace and self._transport_headers(self.transport):
                opening = cast(_HeaderTransport, self.transport).stream(
                    self.backend.chat_url, _encode(body), self._authorization, headers=trace
                )
            else:
                opening = self.transport.stream(self.backend.chat_url, _encode(body), self._authorization)
            async with opening as opened:
                yield opened[0], opened[1], opened[2], opened[3] if len(opened) > 3 else None
            return
        headers = self._with_trace(self._chat_headers, trace)
        if self.session is not None:
            async with await posted(
                self.session,
                self.backend.chat_url,
                data=_encode(body),
                headers=headers,
                timeout=self._stream_session_timeout,
                allow_redirects=False,
                auto_decompress=False,  # an encoded answer is refused, never unpacked (``_IDENTITY``)
            ) as answer:
                self._reading.add(answer)
                try:
                    encoding = answer.headers.get("Content-Encoding")
                    if answer.status < 300:
                        _refuse_encoded(self.backend.name, encoding, body, self._key)
                    yield (
                        answer.status,
                        functools.partial(
                            _quoted, functools.partial(_read_start, answer), encoding, body, self._key
                        ),
                        split_lines(answer.content.iter_any(), MAX_LINE_BYTES),
                        answer.headers.get("Retry-After"),
                    )
                finally:
                    self._reading.discard(answer)
            return
        async with self.http.stream(
            "POST",
            self.backend.chat_url,
            content=_encode(body),
            headers=headers,
            timeout=self._stream_timeout,
        ) as response:
            encoding = response.headers.get("Content-Encoding")
            if response.status_code < 300:
                _refuse_encoded(self.backend.name, encoding, body, self._key)
            yield (
                response.status_code,
                functools.partial(_quoted, functools.partial(_start, response), encoding, body, self._key),
                split_lines(response.aiter_raw(), MAX_LINE_BYTES),
                response.headers.get("Retry-After"),
            )

    def cut(self) -> None:
        """End every answer being read over ``session`` now: its reader fails at once with a
        connection error (``BackendFailed`` from ``chat`` and ``stream``). For the owner closing
        ``session`` under calls in flight: aiohttp tells no reader of an answer whose body has
        begun that its pool closed, so a stream would wait out ``idle_s`` before it failed."""
        for answer in list(self._reading):
            answer.close()

    async def scrape(self, now: float) -> EngineLoad:
        """Read the backend's Prometheus metrics; raises ``BackendFailed`` if they cannot be read
        within ``probe_s`` (in all, not per read) or pass ``MAX_METRICS_CHARS`` bytes (refused
        while they arrive, not once held whole)."""
        if self.backend.metrics_url is None:
            raise BackendFailed(f"{self.backend.name}: no metrics_url")
        try:
            async with (
                asyncio.timeout(self.timeouts.probe_s),
                self.http.stream(
                    "GET",
                    self.backend.metrics_url,
                    headers=self._metrics_headers,
                    timeout=self._probe_timeout,
                ) as response,
            ):
                if response.status_code != 200:
                    raise BackendFailed(f"{self.backend.name}: metrics answered HTTP {response.status_code}")
                encoding = response.headers.get("Content-Encoding")
                _refuse_encoded(f"{self.backend.name}: metrics", encoding, None, self._key)
                parts: list[bytes] = []
                size = 0
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > MAX_METRICS_CHARS:
                        raise BackendFailed(
                            f"{self.backend.name}: metrics are over {MAX_METRICS_CHARS} bytes"
                        )
                    parts.append(chunk)
                # UTF-8 whatever the header says: the exposition format is UTF-8, and a charset
                # that names no text codec (``rot13``, ``base64``) made ``decode`` raise LookupError.
                text = b"".join(parts).decode("utf-8", "replace")
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as exc:
            raise BackendFailed(f"{self.backend.name}: metrics: {type(exc).__name__}") from None
        try:
            return load_from_text(text, self.backend.engine, now=now)
        except BackendFailed as exc:
            # Metrics read but unusable (a count of 1e308, NaN, a page of HTML) name the backend
            # too: until review R61 they did not, and a caller could not tell which had sent them.
            raise BackendFailed(f"{self.backend.name}: metrics: {exc}") from None

    async def health(self) -> bool:
        """True if ``GET {url}{health_path}`` (``/health``: vLLM, SGLang, TGI, llama.cpp all serve
        it) answers 200 within ``probe_s``."""
        return await self._probe(self.backend.health_path)

    async def accepts_credentials(self) -> bool:
        """True if ``GET /v1/models`` answers 200 within ``probe_s``, with the backend's key sent as
        for a chat call: the probe of a backend that rejected our credentials (vLLM and SGLang
        guard ``/v1`` with ``--api-key`` but not ``/health``, which would pass regardless)."""
        return await self._probe("/v1/models")

    async def _probe(self, path: str) -> bool:
        """True if ``GET {url}{path}`` (the probe headers: the key, if any) answers 200 within
        ``probe_s``, whatever its length: only its first ``_SMALL`` bytes are read (a hosted
        endpoint's ``/v1/models`` lists hundreds of models; until review R53 an answer over
        ``_SMALL`` failed the probe, and such a backend never came back); False for any other
        status, transport failure or timeout."""
        try:
            async with (
                asyncio.timeout(self.timeouts.probe_s),
                self.http.stream(
                    "GET",
                    self.backend.url.rstrip("/") + path,
                    headers=self._probe_headers,
                    timeout=self._probe_timeout,
                ) as response,
            ):
                size = 0
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > _SMALL:
                        break  # not held; the connection, its answer unread, is closed
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError):
            return False
        return response.status_code == 200

    def _check_status(self, status: int, text: str, retry_after: str | None = None) -> None:
        """Raise for an answer that is not a success: ``BackendRejectedCredentials`` for 401/403
        (the backend's text left out), ``RequestRejected`` quoting ``text`` for a request the
        backend calls invalid, else ``BackendFailed`` quoting it; for a 429 or 503, with the time
        its ``retry_after`` header asks for (``retry_after_s``) as ``retry_after_s``."""
        if status < 300:
            return
        if status in _CREDENTIAL_ERRORS:
            configured = (
                "the API key it was sent"
                if self._key is not None
                else "no API key (none is configured: set api_key_env or api_key_file)"
            )
            raise BackendRejectedCredentials(
                f"{self.backend.name} rejected our credentials: HTTP {status} for {configured}"
            )
        if status in _CALLER_ERRORS:
            raise RequestRejected(f"{self.backend.name} rejected the request: HTTP {status}: {text}")
        wait = retry_after_s(retry_after) if status in _BUSY else None
        asked = "" if wait is None else f" (Retry-After: {wait:g} s)"
        raise BackendFailed(f"{self.backend.name}: HTTP {status}{asked}: {text}", retry_after_s=wait)

    def _excerpt(self, body: bytes, payload: Mapping[str, Any]) -> str:
        """The start of an error answer's ``body`` for a message, scrubbed of the key and of the
        prompt of ``payload`` (``_prompt_texts``) as it came, before it is cut (a key or prompt
        cut in two would not be found) or changed, on one line: each run of white space, line
        breaks and the indents after them, is one space (until review R61 an nginx error page or a
        pretty-printed JSON error was quoted over several lines), and each other character that
        is not printable written as its escape (``escaped``: until review R66 a terminal escape,
        a bidi override or a NUL in the body reached the gateway's log and the audit outcome).
        Until review R89 the prompt was scrubbed after (``_shown``), where its echo no longer
        read as sent past a run of spaces or a character that is not printable, and the rest of
        it was quoted; and after the cut, which left up to 7 characters of a prompt's start. A
        body is taken as cut at the read unless it is known whole (``WholeBody``, within
        ``_QUOTED`` bytes): of its last 7 characters, the longest end not redacted that a prompt
        or the key starts with is left out (``_scrub``'s ``cut``), where an echo's start is too
        short to be found (until a regression review of R90b all 7 were, the backend's own words
        too); until review R90 it was quoted
        once white space before it was folded, and until a regression review of R90 it was for
        a first piece to arrive shorter than ``_QUOTED`` bytes (a body sent in two writes).
        A body cut at the read is decoded less a character cut in two at its end (the bytes of
        it that came): until review R91 they were one U+FFFD, which no prompt starts with, and
        the prompt's start before it was quoted where the cut fell inside a character
        (``HTTP 400: <pre> Паро�``), half of the cuts of a prompt past ASCII.

        Up to ``_READ_PAST_THE_CUT`` bytes past the first ``_QUOTED`` are scrubbed with them and
        never quoted (``_scrub``'s ``upto``): an echo standing across the cut is found whole.
        Until a regression review of R91 the body was scrubbed as cut at ``_QUOTED`` bytes, which
        hides only a start of the key or a prompt there, and an inner piece of the key shorter
        than 16 characters standing at the cut was quoted once the white space before it was
        folded (an echo of the key less its first characters). Where fewer than those bytes came
        (a first piece to arrive of 600 or 1,030 bytes, or a transport that returned the first
        1,024), the end of what came is cut at the read, and of its last 15 characters the longest
        end not redacted that is a piece of the key 4 characters or longer is left out too
        (``_scrub``'s ``cut``, ``_KEY_PIECE_AT_THE_CUT``): until a regression review of R91b it
        was quoted, 9 characters of the key less its first 4."""
        seen = body[: _QUOTED + _READ_PAST_THE_CUT]
        whole = isinstance(body, WholeBody) and len(body) == len(seen)
        text = _UTF_8(errors="replace").decode(seen, final=whole)
        shown = len(_UTF_8(errors="replace").decode(seen[:_QUOTED], final=whole and len(seen) <= _QUOTED))
        text = _scrub(text, self._key, _prompt_texts(payload), cut=not whole, upto=shown)
        return escaped(_cut_whole(" ".join(text.split()), 200))

    def _shown(self, exc: DispatchError) -> DispatchError:
        """``exc`` made fit to leave this client: nothing chained to it (the exceptions it was
        raised from, such as a parser's refusal of a status line that echoed the key, may quote
        the key), and, when its message quotes the key (whole or a piece of it: a backend that
        echoes what it was sent puts it in error bodies, error events, usage, lines that are not
        SSE, or lines the HTTP parser refuses), an error of the same type with it redacted
        (``_scrub``): over the whole message, as a key is never words of ours.

        The prompt is not scrubbed here: it was where the backend's words entered the message
        (``_excerpt``, ``_reject_error``, ``_line_shown``, ``_quoted_echo``, ``_failure_text``),
        before they were cut or escaped. Until a regression review of R89 it was scrubbed here
        too, from agentgate's own words as well: a prompt starting ``request 0: hello`` made a
        stream's failure read ``no first token within 0.5s of the [redacted](first_token_s)``.
        The message reaches logs and a model call's audit outcome, where the prompt is never
        stored."""
        text = str(exc)
        scrubbed = _scrub(text, self._key)
        if scrubbed != text:
            shown = type(exc)(scrubbed)
            if isinstance(exc, BackendFailed) and isinstance(shown, BackendFailed):
                shown.retry_after_s = exc.retry_after_s
            exc = shown
        exc.__cause__ = exc.__context__ = None
        exc.__suppress_context__ = True
        return exc


def _failure_text(exc: BaseException, payload: Mapping[str, Any], key: str | None = None) -> str:
    """What a transport failure ``exc`` says, on one line: its type and its text, each line of
    the text stripped and joined by a space, and a line that is only a caret left out (it points
    into the line above, at nothing once they are joined). aiohttp reports an answer its parser
    refuses as a ``ClientResponseError`` of status 400, its text the parser's message quoted with
    ``repr`` (``message="Bad status line:\\n  ...\\n    ^"``): its own message is read instead,
    under words that say the answer could not be read, not that the backend sent a 400. Until
    review R61 those quoted line breaks and the caret reached the ``BackendFailed``, and so logs
    and a model call's audit outcome.

    The text is scrubbed of ``key`` and the prompt of ``payload`` (``_prompt_texts``) as it came,
    before it is cut and folded: a parser's refusal quotes the line the backend sent, which may
    echo either (until a regression review of R91 the key was scrubbed after the cut, from the
    message, ``_shown``: a start of it under 8 characters at the cut was quoted). Only its
    first ``_QUOTED`` characters are kept, as of an error body (``_excerpt``): until review R90 it
    was scrubbed and quoted whole, and a header line of 60,000 characters echoing a prompt of one
    character repeated held the event loop over a second for each attempt (``_scrub``'s work
    grows with the text's length times its longest echo). Not a ``ValueError``'s: that is
    ``split_lines``'s refusal of a line over its limit, our own words. A transport's refusal of
    a ``Content-Encoding`` (``EncodedAnswer``) is told as the client's own paths tell it: the
    header scrubbed of ``key`` and the prompt as it came, then cut and escaped
    (``_encoding_shown``).

    A parser quotes the line it refused with ``repr`` (h11's ``bytearray(b'...')``, aiohttp's
    ``b'...'``), so the prompt and the key are also looked for as ``repr`` writes them
    (``_repr_texts``): until a regression review of R91 an echo of a prompt past ASCII
    (``\\xd0\\x9f\\xd0\\xb0...``), or of one or the key holding a backslash or a quote, was
    quoted. Those forms are written only where the text read holds an escape and a quote, from
    as much of each text as is read: until a regression review of R91b they were written from
    every whole message on every failure, a refused connection too."""
    if isinstance(exc, EncodedAnswer):
        return _encoding_refused(exc.encoding, payload, key)
    said = f"{exc.message}" if isinstance(exc, aiohttp.ClientResponseError) else str(exc)
    if not isinstance(exc, ValueError):
        said = _scrub_start(said, key, _prompt_texts(payload), _QUOTED, in_repr=True)
    if isinstance(exc, aiohttp.ClientResponseError):
        said = f"the answer is not HTTP that can be read: {said}"
    lines = (line.strip() for line in said.splitlines())
    return f"{type(exc).__name__}: " + " ".join(line for line in lines if line.strip("^"))


def _encode(body: Mapping[str, Any]) -> bytes:
    """``body`` as JSON; raises ``FieldError`` naming its first field that JSON cannot write (a
    ``Decimal``, a set, a cycle, nesting deeper than Python's recursion limit, an integer of more
    than 4,300 digits, a NaN or an infinity). ``Dispatcher.route_request`` calls it before the
    call is routed: until review R86 the bare ``TypeError`` or ``RecursionError`` came from here,
    after the router had dispatched the call and debited its tenant; until review R89 orjson
    wrote a NaN or an infinity as ``null`` (``temperature`` NaN was sent as the engine's
    default, a ``logit_bias`` of -inf as none), without a word."""
    try:
        return _orjson(body)
    except (orjson.JSONEncodeError, ValueError):  # what orjson does not take or would not keep
        pass
    try:
        return json.dumps(body, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise _unwritable(body, exc) from None


def _orjson(value: object) -> bytes:
    """``value`` as orjson writes it; raises ``orjson.JSONEncodeError`` for what orjson does not
    write, and ``ValueError`` for a NaN or an infinity in it, which orjson writes as ``null``
    (so only a body whose text holds ``null`` is walked: most hold none)."""
    encoded = orjson.dumps(value)
    if b"null" in encoded and not _finite(value):
        raise ValueError("Out of range float values are not JSON compliant")
    return encoded


def _finite(value: object) -> bool:
    """Whether no float in ``value`` (in its mappings' values, lists, tuples, dataclasses and enum
    members' values, as orjson walks them) is a NaN or an infinity. Only for a value orjson wrote,
    so no deeper than the 255 levels it writes. A body of 20 messages costs a few microseconds,
    some three times what orjson takes to write it: the plain types are told by their exact type
    first (faster than ``isinstance``), their subclasses and the abstract types after. Until a
    regression review of R89 an ``Enum`` member was not walked: one whose value is NaN was sent
    as ``null``; until review R90 a dataclass's attributes that are no field were not either."""
    kind = type(value)
    if kind is str or value is None or kind is int or kind is bool:
        return True
    items: Iterable[object]
    if type(value) is dict:
        items = value.values()
    elif type(value) is list or type(value) is tuple:
        items = value
    elif isinstance(value, float):
        return math.isfinite(value)
    elif isinstance(value, Enum):  # orjson writes a member as its value (a float one is a float)
        return _finite(value.value)
    elif isinstance(value, Mapping):
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    elif is_dataclass(value) and not isinstance(value, type):
        items = _dataclass_written(value)
    else:
        return True
    for item in items:  # noqa: SIM110 (a loop: ``all`` of a generator takes twice as long)
        if type(item) is not str and not _finite(item):
            return False
    return True


def _dataclass_written(value: object) -> list[object]:
    """The values orjson writes of a dataclass instance ``value``, chosen as orjson chooses them:
    those of its fields where its class itself declares ``__slots__`` or it has no ``__dict__``,
    else those of its ``__dict__`` (every attribute set on it, a field or not: ``s.top_p = nan``
    after it was made); none whose name starts with an underscore, which orjson leaves out.
    Until review R90 its fields' alone were walked, and a NaN in another attribute was sent as
    ``null``; until a regression review of R90 a slots dataclass over a class without slots
    (whose instances have a ``__dict__``, empty of its fields) had its ``__dict__`` walked, and a
    NaN field was sent as ``null``."""
    attributes = None if "__slots__" in type(value).__dict__ else getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return [item for name, item in attributes.items() if not str(name).startswith("_")]
    names = (field.name for field in fields(cast(Any, value)) if not field.name.startswith("_"))
    return [getattr(value, name, None) for name in names]


def _unwritable(body: Mapping[str, Any], exc: BaseException) -> FieldError:
    """The ``FieldError`` for ``body``, which ``_encode`` could not write (``json`` refused it
    with ``exc``). Each field is judged as ``_encode`` judges a body, orjson first and then
    ``json``: the first field neither writes is named, with why in ``json``'s words (orjson's
    where orjson refused only a NaN or an infinity in it: an ``Enum`` member of one). Where each
    field can be written alone, the body mixes a value only ``json`` writes with one only orjson
    writes (a ``UUID``, a ``datetime``), and the refusal names the first field of the one kind
    beside the first of the other, each with the words of the encoder that refused it. No value
    is quoted (a prompt may be in it). Until review R86b each field was judged by ``json`` alone:
    a body of a ``UUID`` and an integer beyond 64 bits was refused naming the ``UUID``'s field,
    which ``_encode`` writes; until review R86c the field only ``json`` writes was said to hold
    an integer beyond 64 bits, a number as a key or deep nesting, whatever orjson refused in it
    (a lone surrogate in a prompt)."""
    only_json: tuple[str, BaseException] | None = None
    only_orjson: tuple[str, BaseException] | None = None
    for name, value in body.items():
        field = {name: value}
        by_orjson: BaseException | None = None
        try:
            _orjson(field)
        except (orjson.JSONEncodeError, ValueError) as refused:
            by_orjson = refused
        try:
            json.dumps(field, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as refused:
            if by_orjson is not None:
                shown = _field_shown(name)
                # orjson wrote it but for a NaN or an infinity (``_orjson``'s ValueError): that is
                # why, not json's "not JSON serializable" of an ``Enum`` or a ``UUID`` holding it.
                why = by_orjson if isinstance(by_orjson, ValueError) else refused
                return FieldError(shown, f"body field '{shown}' cannot be written as JSON: {_reason(why)}")
            only_orjson = only_orjson or (name, refused)
        else:
            if by_orjson is not None:
                only_json = only_json or (name, by_orjson)
    if only_json is not None and only_orjson is not None:
        shown, other = _field_shown(only_json[0]), _field_shown(only_orjson[0])
        return FieldError(
            shown,
            f"body field '{shown}' cannot be written as JSON beside body field '{other}': only "
            f"Python's json writes '{shown}' (orjson: {_reason(only_json[1])}), only orjson "
            f"'{other}' (json: {_reason(only_orjson[1])})",
        )
    return FieldError("body", f"the body cannot be written as JSON: {_reason(exc)}")


def _field_shown(name: object) -> str:
    """A body field's name as a refusal quotes it: one line, at most 80 characters."""
    return bounded(escaped(name), 80) if isinstance(name, str) else quoted(name)


def _reason(refused: BaseException) -> str:
    """Why ``json`` refused a value, in its words (``refused``), never quoting the value."""
    if isinstance(refused, RecursionError):
        return "it is nested too deeply"
    return bounded(escaped(str(refused)), 200)


async def _start(response: httpx.Response) -> bytes:
    """The first piece of ``response``'s body to arrive, at most ``_QUOTED`` bytes and the
    ``_READ_PAST_THE_CUT`` scrubbed past them (``_excerpt``), as sent (not decoded): a
    ``WholeBody`` where it is all the body (as long as its ``Content-Length``, or the body ended
    with no piece), else taken as cut (httpx does not tell whether more is on its way)."""
    length = response.headers.get("Content-Length")
    declared = None if length is None else declared_length(length)
    read = _QUOTED + _READ_PAST_THE_CUT
    async for piece in response.aiter_raw():
        if piece:
            whole = declared is not None and len(piece) == declared <= read
            return WholeBody(piece) if whole else piece[:read]
    return WholeBody()


async def _read_start(answer: aiohttp.ClientResponse) -> bytes:
    """What has arrived of ``answer``'s body once any has, at most ``_QUOTED`` bytes and the
    ``_READ_PAST_THE_CUT`` scrubbed past them (``_excerpt``), as sent: a ``WholeBody`` where the
    body ended there, else taken as cut."""
    start = await answer.content.read(_QUOTED + _READ_PAST_THE_CUT)
    return WholeBody(start) if answer.content.at_eof() else start


async def _quoted(
    read: Callable[[], Awaitable[bytes]],
    encoding: str | None,
    request: Mapping[str, Any],
    key: str | None = None,
) -> bytes:
    """What is quoted of an error answer: the start of its body as ``read`` reads it (as sent), or
    for a body sent with a ``Content-Encoding`` (``encoding``) words that say so, nothing read:
    it is not decoded (``_IDENTITY``), and its bytes as sent say nothing. The header is quoted as
    a refused one is (``_encoding_shown``, scrubbed of ``key`` and the prompt of ``request``
    before it is cut): until review
    R90 it was written as it came, and a byte of it that is not UTF-8 (a lone surrogate, as
    aiohttp keeps it) was a bare ``UnicodeEncodeError`` out of ``chat`` instead of the
    ``BackendFailed`` of the error answer, and a prompt's start in its last 7 characters quoted."""
    if not _encoded(encoding):
        return await read()
    return _not_decoded_words(encoding, request, key)


def _not_decoded_words(encoding: str, request: Mapping[str, Any] | None, key: str | None) -> bytes:
    """What is quoted of an error answer sent with the ``Content-Encoding`` ``encoding`` (other
    than ``identity``): words that say so, whole, the header quoted as ``_encoding_shown`` quotes
    it (scrubbed of ``key`` and the prompt of ``request``); ``_quoted``'s, the gateway pool's too."""
    said = f"(a body with Content-Encoding: {_encoding_shown(encoding, request, key)}, not decoded)"
    return WholeBody(said.encode())  # our words, whole
