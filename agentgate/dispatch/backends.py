"""Async HTTP clients for OpenAI-compatible inference backends: chat, streaming, metrics, health.

One pooled ``httpx.AsyncClient`` serves every backend; chat calls (streamed or not) go over a pooled
``aiohttp.ClientSession`` when the client is given one (the dispatcher does: aiohttp takes about
1 ms less per call than httpx's async client). Whatever goes wrong below this module
(refused connection, timeout, a connection cut mid-stream, an HTTP error, bytes that are not the
JSON or SSE promised) surfaces as ``BackendFailed``, which the dispatcher answers by failing
over; a 4xx that says the request itself is bad surfaces as ``DispatchError`` and is not retried.
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
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import inspect
import json
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Protocol, cast

import aiohttp
import httpx
import orjson
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentgate.dispatch.inventory import Backend, origin
from agentgate.dispatch.metrics import MAX_METRICS_CHARS, EngineLoad, load_from_text
from agentgate.errors import (
    BackendCredentialError,
    BackendFailed,
    BackendRejectedCredentials,
    DispatchError,
    InputError,
)

_CALLER_ERRORS = frozenset({400, 413, 422})
_CREDENTIAL_ERRORS = frozenset({401, 403})
_BUSY = frozenset({429, 503})
"""The statuses whose ``Retry-After`` is read (``retry_after_s``): too many requests, unavailable."""
MAX_RETRY_AFTER_S = 300.0
"""The longest a backend's ``Retry-After`` is honoured for (seconds): a longer one (an hour, a
date next year: a proxy's misconfiguration more likely than a plan) is taken as this, so that a
backend is tried again within five minutes whatever it said."""
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest non-streamed answer read (after decompression): a chat completion with every
token's log-probabilities is a few MB; a larger body is garbage, or a bomb, not an answer."""
_SMALL = 1 << 16
"""An answer of at most this many bytes, not compressed, is read in one go."""
_QUOTED = 1024
"""The most bytes of an error answer's body that are quoted (``_excerpt``): a streamed call reads
no more of it than has arrived once any has (``_post_stream``)."""
MAX_LINE_BYTES = 1 << 20
"""The longest line of a streamed answer held (an SSE event with every token's log-probabilities
is a few kB): a longer one fails the stream as it arrives, never buffered whole."""
MAX_CHARS_PER_TOKEN = 1024
"""How many characters of a streamed answer (content, tool call fragments, reasoning) one token of
``max_tokens`` may bring before the stream is taken for a backend that ignores ``max_tokens``:
a bound against a stream without end, set some hundred times above the few characters a token
usually decodes to, so that an answer keeping to its limit is not cut."""
_SSE_IGNORED = (":", "event:", "id:", "retry:")
"""Stream lines that carry no chunk: SSE comments and the fields other than ``data``."""
_JSON = {"content-type": "application/json"}
_TRACE_CONTEXT = TraceContextTextMapPropagator()


def trace_headers(context: Context | None = None) -> dict[str, str]:
    """The W3C Trace Context headers of the span current in ``context`` (default: the current
    context): ``traceparent``, and ``tracestate`` when the trace carries one; empty when there is
    no valid span. Only W3C Trace Context, never ``baggage``: what a chat call sends a backend."""
    carrier: dict[str, str] = {}
    _TRACE_CONTEXT.inject(carrier, context)
    return carrier


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a backend may take (seconds). Raises ``InputError`` for a limit that is not
    positive and finite (zero would fail every call; NaN or infinity would never fire)."""

    connect_s: float = 2.0
    """To open a connection."""
    first_token_s: float = 60.0
    """From sending the request to the first token (or the whole answer when not streaming)."""
    idle_s: float = 30.0
    """Between two chunks of a stream."""
    probe_s: float = 1.0
    """For a health check or a metrics scrape."""

    def __post_init__(self) -> None:
        for name in ("connect_s", "first_token_s", "idle_s", "probe_s"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise InputError(f"timeout {name} must be positive and finite, got {value!r}")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts a backend reported: non-negative integers, always (budgets are charged and
    counters incremented with them, and neither takes a negative count).

    Raises ``ValueError`` when built with anything else; ``_usage`` reads a backend's answer into
    one, and refuses (``BackendFailed``, through its callers) what would not make one.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    def __post_init__(self) -> None:
        for count in (self.prompt_tokens, self.completion_tokens, self.cached_tokens):
            if type(count) is not int or count < 0:
                raise ValueError(f"a token count must be a non-negative integer, not {count!r}")


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One streamed piece of an answer."""

    content: str
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    """The delta's tool call fragments (OpenAI's ``delta.tool_calls``), passed on as sent."""
    event: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The whole event as the backend sent it, decoded: what it carries beside the fields above
    (a reasoning model's ``delta.reasoning_content``, ``logprobs``, its ``id``); empty if not kept."""
    backend: str = ""
    """The name of the backend that sent it (empty for a chunk made elsewhere)."""


@dataclass(frozen=True, slots=True)
class ChatResult:
    """A complete answer."""

    backend: str
    content: str
    finish_reason: str | None
    usage: Usage
    body: Mapping[str, Any]
    raw: bytes = field(default=b"", repr=False)
    """The body as the backend sent it (``body`` is its decoded form); empty if not kept."""


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
        its body's start may do: only the first ``_QUOTED`` bytes are quoted), and, as a third
        item, the answer's ``Retry-After`` header (``None`` without one; a transport that gives
        no third item is taken to have none); raises ``OSError`` if none can be read."""
        ...

    def stream(
        self, url: str, body: bytes, authorization: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[StreamAnswer]:
        """POST the JSON ``body`` for a streamed answer: the status, a reader of its body (called
        only for an error status, to quote the body's first ``_QUOTED`` bytes: it may return just
        what has arrived of it), its lines, and, as a fourth item, its ``Retry-After`` header
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
        self._session_timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timeouts.connect_s, sock_read=self.timeouts.first_token_s
        )
        self._stream_session_timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timeouts.connect_s, sock_read=self.timeouts.idle_s
        )
        # Built once: the same limits for every request of a kind.
        self._answer_timeout = self._timeout(self.timeouts.first_token_s)
        self._stream_timeout = self._timeout(self.timeouts.idle_s)
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
        self._probe_headers = auth  # /health is on the origin of ``url``
        same_origin = backend.metrics_url is not None and origin(backend.metrics_url) == origin(backend.url)
        self._metrics_headers = auth if same_origin else {}

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

        Raises ``BackendFailed`` on any transport failure, timeout, redirect, 5xx/429, an error
        reported with HTTP 200 (``_reject_error``) or a malformed body (a body that is not JSON, a
        choice without string content, a ``finish_reason`` that is not a string, usage that is
        not counts: see ``_usage``); ``DispatchError`` when the backend rejects the request as
        invalid (400, 422, ...); ``BackendRejectedCredentials`` for 401/403. No message holds the
        backend's key (``_shown``).
        """
        try:
            return await self._chat(payload, trace_headers(trace_context))
        except DispatchError as exc:
            error = self._shown(exc, payload)
        raise error  # outside the handler: nothing chained to it

    async def _chat(self, payload: Mapping[str, Any], trace: Mapping[str, str]) -> ChatResult:
        content = _encode({**payload, "stream": False})
        try:
            async with asyncio.timeout(self.timeouts.first_token_s):
                status, raw, retry_after = await self._post(content, trace)
        except TimeoutError:
            raise BackendFailed(
                f"{self.backend.name}: no answer within {self.timeouts.first_token_s}s"
            ) from None
        except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
            raise BackendFailed(f"{self.backend.name}: {type(exc).__name__}: {exc}") from None
        self._check_status(status, self._excerpt(raw), retry_after)
        try:
            data = orjson.loads(raw)
            _reject_error(self.backend.name, data, self._key)
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
            return ChatResult(
                self.backend.name, text, _finish_reason(choice), _usage(data.get("usage")), data, raw
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BackendFailed(f"{self.backend.name}: malformed chat completion: {exc}") from None

    async def _post(self, content: bytes, trace: Mapping[str, str]) -> tuple[int, bytes, str | None]:
        """POST ``content`` to the chat endpoint (with the ``trace`` headers): the status and the
        whole body (redirects not followed), or for a status of 300 or more what has arrived of
        the body once any has, at most ``_QUOTED`` bytes (an error's body is quoted, never waited
        for or held whole), and the answer's ``Retry-After`` (``None`` without one); raises
        ``BackendFailed`` for a body over ``MAX_ANSWER_BYTES``."""
        if self.transport is not None:
            if trace and self._transport_headers(self.transport):
                traced = cast(_HeaderTransport, self.transport)
                got = await traced.post(self.backend.chat_url, content, self._authorization, headers=trace)
            else:
                got = await self.transport.post(self.backend.chat_url, content, self._authorization)
            return got[0], got[1], got[2] if len(got) > 2 else None
        headers = self._with_trace(self._chat_headers, trace)
        if self.session is not None:
            async with self.session.post(
                self.backend.chat_url,
                data=content,
                headers=headers,
                timeout=self._session_timeout,
                allow_redirects=False,
            ) as answer:
                self._reading.add(answer)
                try:
                    if answer.status >= 300:
                        retry_after = answer.headers.get("Retry-After")
                        return answer.status, await answer.content.read(_QUOTED), retry_after
                    small = answer.content_length is not None and answer.content_length <= _SMALL
                    if small and "content-encoding" not in answer.headers:
                        return answer.status, await answer.read(), None  # the usual answer: a few kB
                    return answer.status, await self._capped(answer.content.iter_chunked(1 << 20)), None
                finally:
                    self._reading.discard(answer)
        async with self.http.stream(
            "POST",
            self.backend.chat_url,
            content=content,
            headers=headers,
            timeout=self._answer_timeout,
        ) as response:
            if response.status_code >= 300:
                return response.status_code, await _start(response), response.headers.get("Retry-After")
            return response.status_code, await self._capped(response.aiter_bytes()), None

    async def _capped(self, chunks: AsyncIterator[bytes]) -> bytes:
        """The body, read up to ``MAX_ANSWER_BYTES`` (decoded: a gzip bomb counts at its size
        unpacked); raises ``BackendFailed`` once it is larger."""
        parts: list[bytes] = []
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise BackendFailed(
                    f"{self.backend.name}: answer larger than {MAX_ANSWER_BYTES} bytes: no chat completion is"
                )
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
        usage said again: ``_advances``), a
        stream that ends without ``[DONE]``, an error event (``_reject_error``), or an event that
        is malformed (not JSON, nested too deeply, or fields of the wrong kind, as ``chat``
        refuses them); raises as ``chat`` for an HTTP error status.
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
        produced = 0
        seen = _Seen()
        try:
            async with contextlib.AsyncExitStack() as opened:
                # The answer's head (and an error's body) come under the first chunk's deadline
                # too: a backend that accepts the connection and never answers must not hold the
                # call, its slot and its reservation for ever (the lean pool has no timer of its own).
                try:
                    async with asyncio.timeout_at(deadline):
                        status, read, lines, retry_after = await opened.enter_async_context(
                            self._post_stream(body, trace)
                        )
                        # The start only: an error's body may never end (``_post_stream``).
                        refusal = self._excerpt(await read()) if status >= 300 else ""
                except TimeoutError:
                    raise BackendFailed(f"{self.backend.name}: no answer within {wait}s") from None
                self._check_status(status, refusal, retry_after)
                first = True
                while True:
                    try:
                        async with asyncio.timeout_at(deadline):
                            line = await anext(lines)
                    except StopAsyncIteration:
                        raise BackendFailed(f"{self.backend.name}: stream ended without [DONE]") from None
                    except TimeoutError:
                        raise BackendFailed(
                            f"{self.backend.name}: stream silent for {wait}s (no chunk)"
                        ) from None
                    if first:
                        # The SSE format lets a stream open with a byte order mark, which belongs
                        # to no line: the first event after it was refused as not SSE.
                        line, first = line.removeprefix("\ufeff"), False
                    if not line or line.startswith(_SSE_IGNORED):
                        continue  # a comment, or an SSE field other than data (event, id, retry)
                    if not line.startswith("data:"):
                        raise BackendFailed(
                            f"{self.backend.name}: not an SSE event: {_line_shown(line, self._key)}"
                        )
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    chunk = _parse_chunk(self.backend.name, data, self._key)
                    if chunk is not None:
                        if limit is not None and (produced := produced + _answer_chars(chunk)) > limit:
                            raise BackendFailed(
                                f"{self.backend.name}: streamed over {limit} characters for a call "
                                f"of max_tokens {limit // MAX_CHARS_PER_TOKEN}: it ignores max_tokens"
                            )
                        yield chunk
                        if _advances(chunk, seen):
                            wait = self.timeouts.idle_s
                            deadline = loop.time() + wait
        except (httpx.HTTPError, aiohttp.ClientError, ValueError, OSError) as exc:
            # ValueError: a line over its limit (``split_lines``).
            error = self._shown(BackendFailed(f"{self.backend.name}: {type(exc).__name__}: {exc}"), payload)
        except DispatchError as exc:
            error = self._shown(exc, payload)
        raise error  # outside the handlers: nothing chained to it

    @contextlib.asynccontextmanager
    async def _post_stream(
        self, body: Mapping[str, Any], trace: Mapping[str, str]
    ) -> AsyncIterator[tuple[int, Callable[[], Awaitable[bytes]], AsyncIterator[str], str | None]]:
        """POST a streaming request (with the ``trace`` headers): the status, a reader of the start
        of the body (what has arrived of it once any has, at most ``_QUOTED`` bytes: an error
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
            async with self.session.post(
                self.backend.chat_url,
                data=_encode(body),
                headers=headers,
                timeout=self._stream_session_timeout,
                allow_redirects=False,
            ) as answer:
                self._reading.add(answer)
                try:
                    yield (
                        answer.status,
                        functools.partial(answer.content.read, _QUOTED),
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
            yield (
                response.status_code,
                functools.partial(_start, response),
                split_lines(response.aiter_bytes(), MAX_LINE_BYTES),
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
                parts: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
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
        return load_from_text(text, self.backend.engine, now=now)

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
        (the backend's text left out), ``DispatchError`` quoting ``text`` for a request the
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
            raise DispatchError(f"{self.backend.name} rejected the request: HTTP {status}: {text}")
        wait = retry_after_s(retry_after) if status in _BUSY else None
        asked = "" if wait is None else f" (Retry-After: {wait:g} s)"
        raise BackendFailed(f"{self.backend.name}: HTTP {status}{asked}: {text}", retry_after_s=wait)

    def _excerpt(self, body: bytes) -> str:
        """The start of an error answer's ``body`` for a message, scrubbed of the key before it is
        cut (a key cut in two would not be found)."""
        return _scrub(body[:_QUOTED].decode("utf-8", "replace"), self._key)[:200]

    def _shown(self, exc: DispatchError, payload: Mapping[str, Any]) -> DispatchError:
        """``exc`` made fit to leave this client: nothing chained to it (the exceptions it was
        raised from, such as a parser's refusal of a status line that echoed the key, may quote
        the key), and, when its message quotes the key (whole or a piece of it: a backend that
        echoes what it was sent puts it in error bodies, error events, usage, lines that are not
        SSE, or lines the HTTP parser refuses) or the start of a message of the request's prompt
        (a backend's validation error echoing its input), an error of the same type with those
        redacted (``_scrub``). The message reaches logs and a model call's audit outcome, where
        the prompt is never stored."""
        text = str(exc)
        scrubbed = _scrub(text, self._key, _prompt_texts(payload))
        if scrubbed != text:
            shown = type(exc)(scrubbed)
            if isinstance(exc, BackendFailed) and isinstance(shown, BackendFailed):
                shown.retry_after_s = exc.retry_after_s
            exc = shown
        exc.__cause__ = exc.__context__ = None
        exc.__suppress_context__ = True
        return exc


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` header's ``value`` asks a client to wait, from ``now`` (Unix
    time; default: the time now): its delta-seconds (ASCII digits only, RFC 9110 10.2.3) or the
    time to its HTTP-date (0 for a date past), at most ``MAX_RETRY_AFTER_S``. ``None`` for no
    value or one of neither form: a negative or fractional number, garbage (ignored, never an
    error: the backend's failure stands without it)."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return MAX_RETRY_AFTER_S if len(text) > 9 else min(float(text), MAX_RETRY_AFTER_S)
    if not text or text[0].isdigit() or text[0] in "+-":
        return None  # a number of another form (``-5``, ``1.5``) or nothing: no date either
    try:
        when = email.utils.parsedate_to_datetime(text)
        seconds = when.timestamp() if when.tzinfo is not None else when.replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    left = seconds - (time.time() if now is None else now)
    return min(max(0.0, left), MAX_RETRY_AFTER_S)


def _line_shown(line: str, key: str | None) -> str:
    """What a stream's line that is not an SSE event is shown as: a JSON object (an NDJSON
    stream, Ollama's native ``{"message": {"content": ...}}``: its values are generated text) by
    its first keys only, anything else (a proxy's words, an HTML page) as its first 80
    characters, the key redacted."""
    try:
        value = orjson.loads(line[:65536]) if line.startswith("{") else None
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        keys = ", ".join(repr(_scrub(str(k)[:32], key)) for k in list(value)[:8])
        return f"a JSON object with keys {keys} (an NDJSON stream? the backend must speak OpenAI's SSE)"
    return repr(_scrub(line[:1024], key)[:80])


_FRAGMENT = 8
"""The shortest piece of a key, or start of a prompt's message, that ``_scrub`` redacts."""


def _scrub(text: str, key: str | None, prompts: Sequence[str] = ()) -> str:
    """``text`` with ``key``, every start of it ``_FRAGMENT`` or more characters long (what a quote
    cut mid-key, or a masked key, shows) and every other piece of it twice that long (a quote that
    cut the key's start: a shorter piece may be a word of ours, ``credentials``, that a key holds),
    and each of ``prompts`` with every start of it ``_FRAGMENT`` long or more (a backend's echo of
    its input, cut), replaced by ``[redacted]``."""
    if key:
        text = _redact(_redact(text, key, anywhere=False), key, anywhere=True)
    for prompt in prompts:
        text = _redact(text, prompt, anywhere=False)
    return text


def _redact(text: str, secret: str, *, anywhere: bool) -> str:
    """``text`` with each run of characters that stands in ``secret``, ``2 * _FRAGMENT`` or more
    long (``anywhere``: a key, short), or that starts it, ``_FRAGMENT`` or more long (a key, or a
    prompt's message of any length: found with ``str.find``, so a long conversation costs
    little), as ``[redacted]``."""
    text = text.replace(secret, "[redacted]")
    size = min(2 * _FRAGMENT if anywhere else _FRAGMENT, len(secret))
    heads = {secret[k : k + size] for k in range(len(secret) - size + 1)} if anywhere else set()
    head = secret[:size]
    parts: list[str] = []
    start = i = 0
    while True:
        if anywhere:
            while i + size <= len(text) and text[i : i + size] not in heads:
                i += 1
            if i + size > len(text):
                break
        elif (i := text.find(head, i)) < 0:
            break
        end = i + size
        while end < len(text) and (
            text[i : end + 1] in secret if anywhere else secret.startswith(text[i : end + 1])
        ):
            end += 1
        parts += [text[start:i], "[redacted]"]
        start = i = end
    return "".join(parts) + text[start:]


def _prompt_texts(payload: Mapping[str, Any]) -> list[str]:
    """The texts of the request's messages that ``_scrub`` redacts: each ``_FRAGMENT`` characters
    or longer, as sent and as JSON writes it (an echo inside a JSON body keeps its escapes)."""
    messages = payload.get("messages")
    found: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, Mapping) else None
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, Mapping) else part
            if isinstance(text, str) and len(text) >= _FRAGMENT:
                found.append(text)
                escaped = json.dumps(text, ensure_ascii=False)[1:-1]
                if escaped != text:
                    found.append(escaped)
    return found


def _encode(body: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:  # what orjson does not take (an integer beyond 64 bits)
        return json.dumps(body).encode()


async def _start(response: httpx.Response) -> bytes:
    """The first piece of ``response``'s body to arrive, at most ``_QUOTED`` bytes."""
    async for piece in response.aiter_bytes():
        if piece:
            return piece[:_QUOTED]
    return b""


async def split_lines(
    pieces: AsyncIterator[bytes], limit: int, too_long: Callable[[str], Exception] = ValueError
) -> AsyncIterator[str]:
    """The lines of a body read as ``pieces``, decoded as UTF-8, their ends removed: ``\\r\\n``,
    ``\\n`` or a bare ``\\r``, as the SSE format allows all three (a ``\\r`` that ends one piece and
    a ``\\n`` that starts the next are one line end, not two); raises ``too_long(message)`` once a
    line passes ``limit`` bytes, as it arrives (httpx's ``aiter_lines`` holds a line whole, however
    long). ``pieces`` is closed at the end, when it is an async generator. Used by every client
    path: the dispatcher's httpx and aiohttp clients and the gateway's pool.

    Linear in the bytes read: each piece is searched once for each of the two line end bytes,
    from where the unfinished line before it ended, and each line copied once (cutting the rest
    of the buffer off after every line copied the piece once per line: a piece of 256 KiB of
    short lines held the event loop for seconds).
    """
    buffer = bytearray()
    after_cr = False  # the last piece ended with a \r: a \n starting this one belongs to it
    try:
        async for piece in pieces:
            if not piece:
                continue  # an empty piece between a \r and its \n parts neither
            search = len(buffer)  # the unfinished line held has no line end
            buffer += piece
            if after_cr and buffer[search : search + 1] == b"\n":
                del buffer[search]
            after_cr = False
            begin = 0
            # The next \n and \r at or after ``search``; -1 once there is none left in the buffer.
            lf = buffer.find(b"\n", search)
            cr = buffer.find(b"\r", search)
            while lf >= 0 or cr >= 0:
                end = lf if cr < 0 or 0 <= lf < cr else cr
                after = end + 1
                if end == cr:
                    if after == len(buffer):
                        after_cr = True
                    elif buffer[after] == 0x0A:  # \r\n: one line end
                        after += 1
                yield buffer[begin:end].decode("utf-8", "replace")
                begin = search = after
                if 0 <= lf < search:
                    lf = buffer.find(b"\n", search)
                if 0 <= cr < search:
                    cr = buffer.find(b"\r", search)
            del buffer[:begin]
            if len(buffer) > limit:
                raise too_long(f"a streamed line is over {limit} bytes")
        if buffer:
            yield buffer.decode("utf-8", "replace")
    finally:
        if isinstance(pieces, AsyncGenerator):
            await pieces.aclose()


def _parse_chunk(backend: str, data: str, key: str | None = None) -> ChatChunk | None:
    """One SSE event's chunk (``None`` for an event with neither choices nor usage; a usage
    without ``completion_tokens`` counts as none).

    orjson, not ``json``: it refuses ``NaN``, ``Infinity`` and numbers beyond float range, and
    nesting past 1024 levels, as a ``ValueError`` (``json`` would read ``1e999`` as infinity and
    overflow the stack on a line of a million ``[``).
    Raises ``BackendFailed`` for a malformed event.
    """
    try:
        event = orjson.loads(data)
        _reject_error(backend, event, key)
        # vLLM sends ``"usage": null`` on every chunk but the last: an empty usage is none. So is
        # one without a completion count (charged as nothing generated, its output would go free:
        # the stream is then settled as one that reported no usage, at its reservation).
        raw = event.get("usage")
        usage = _usage(raw) if raw else None
        if usage is not None and raw.get("completion_tokens") is None:
            usage = None
        choices = event.get("choices") or []
        if not isinstance(choices, list):
            raise TypeError("choices is not a list")
        if not choices:
            return ChatChunk("", None, usage, event=event, backend=backend) if usage else None
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content") or ""
        if not isinstance(content, str):
            raise TypeError("content is not a string")
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
            raise TypeError("tool_calls is not a list of objects")
        return ChatChunk(content, _finish_reason(choice), usage, tuple(calls), event, backend)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise BackendFailed(f"{backend}: malformed stream event: {exc}") from None


def carries_output(chunk: ChatChunk) -> bool:
    """Whether ``chunk`` passes on any of the answer: its content, tool call fragments, or anything
    else in its delta but the role (a reasoning model's ``reasoning_content``: tokens generated
    and sent, charged as output)."""
    if chunk.content or chunk.tool_calls:
        return True
    choices = chunk.event.get("choices")
    return isinstance(choices, list) and any(
        isinstance(choice, Mapping)
        and isinstance(delta := choice.get("delta"), Mapping)
        and any(value for name, value in delta.items() if name != "role")
        for choice in choices
    )


@dataclass(slots=True)
class _Seen:
    """What a stream has brought so far that it brings once: a finish reason, a usage."""

    finished: bool = False
    reported: bool = False


def _advances(chunk: ChatChunk, seen: _Seen) -> bool:
    """Whether ``chunk`` carries any of the answer: output (``carries_output``), or the stream's
    first finish reason or first usage (``seen`` is updated). A chunk that carries none (an empty
    delta, the role alone: what an engine opens with) passes on, but is chatter: it does not push
    a stream's deadline out; nor does a finish reason or usage said again (until review R54 a
    backend repeating ``finish_reason: stop``, or its usage, and never ``[DONE]`` held the call
    for ever: the answer limit counts neither)."""
    fresh = (bool(chunk.finish_reason) and not seen.finished) or (
        chunk.usage is not None and not seen.reported
    )
    seen.finished = seen.finished or bool(chunk.finish_reason)
    seen.reported = seen.reported or chunk.usage is not None
    return fresh or carries_output(chunk)


def _answer_limit(payload: Mapping[str, Any]) -> int | None:
    """The most characters a stream for ``payload`` may bring: ``MAX_CHARS_PER_TOKEN`` for each
    token of its ``max_completion_tokens`` (else ``max_tokens``); ``None`` when it names no
    positive integer limit (the backend's own default applies, and nothing here knows it)."""
    tokens = payload.get("max_completion_tokens") or payload.get("max_tokens")
    if type(tokens) is not int or tokens <= 0:
        return None
    return tokens * MAX_CHARS_PER_TOKEN


def _answer_chars(chunk: ChatChunk) -> int:
    """The characters of the answer ``chunk`` carries: the text of every value in its choices'
    deltas but the role (content, tool call names and arguments, a reasoning model's
    ``reasoning_content``), counted however the engine nests them."""
    count = 0
    pending: list[object] = []
    choices = chunk.event.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, Mapping) and isinstance(delta := choice.get("delta"), Mapping):
                pending.extend(value for name, value in delta.items() if name != "role")
    else:  # a chunk made without its event
        pending.extend((chunk.content, list(chunk.tool_calls)))
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            count += len(value)
        elif isinstance(value, Mapping):
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
    return count


def _reject_error(backend: str, body: object, key: str | None = None) -> None:
    """Raise ``BackendFailed`` if ``body`` is an error the backend reports with HTTP 200: OpenAI's
    ``{"error": {...}}``, or vLLM's ``{"object": "error", "message": ...}``, which it sends as a
    stream event when generation fails mid-stream and then ends the stream with ``[DONE]`` (read
    as chunks, that would be a short answer passed off as a whole one)."""
    if not isinstance(body, Mapping):
        return
    error = body.get("error")
    if error is None and body.get("object") != "error":
        return
    detail = error.get("message", error) if isinstance(error, Mapping) else error or body.get("message")
    quoted = _scrub(str(detail)[:1024], key)[:200]
    raise BackendFailed(f"{backend}: the backend reported an error: {quoted!r}")


MAX_USAGE_TOKENS = 1_000_000_000
"""The most tokens one count of one call's usage may report (no context window comes near a
billion tokens): a larger count is garbage, not a bill."""


def _finish_reason(choice: Mapping[str, Any]) -> str | None:
    """The choice's ``finish_reason``: a string or ``None``; raises ``TypeError`` for anything else."""
    reason = choice.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"finish_reason is not a string: {reason!r:.80}")
    return reason


def _count(raw: Mapping[str, Any], name: str) -> int:
    """A token count of ``raw``: absent or ``null`` is 0; an integer (or a float with an integral
    value, as orjson reads integers beyond 64 bits) from 0 to ``MAX_USAGE_TOKENS``.

    Raises ``ValueError`` for anything else: a negative or huge count, a fraction, ``true``, a string.
    """
    value = raw.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"usage {name} is not a number: {value!r:.80}")
    if not (0 <= value <= MAX_USAGE_TOKENS) or value != int(value):
        raise ValueError(f"usage {name} is not a token count from 0 to {MAX_USAGE_TOKENS}: {value!r:.80}")
    return int(value)


def _usage(raw: object) -> Usage:
    """The usage a backend reported; ``None`` (not reported) is no usage.

    Raises ``ValueError`` (which the callers turn into ``BackendFailed``) for usage that is not an
    object or whose counts are not token counts (see ``_count``); ``prompt_tokens_details`` that
    is not an object is ignored, as engines that do not cache omit or null it.
    """
    if raw is None:
        return Usage()
    if not isinstance(raw, Mapping):
        raise ValueError(f"usage is not an object: {raw!r:.80}")
    details = raw.get("prompt_tokens_details")
    cached = _count(details, "cached_tokens") if isinstance(details, Mapping) else 0
    return Usage(_count(raw, "prompt_tokens"), _count(raw, "completion_tokens"), cached)
