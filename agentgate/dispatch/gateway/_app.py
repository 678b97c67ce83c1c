"""The OpenAI-compatible gateway: an ASGI app (Starlette) in front of the dispatcher, under the Gate.

``POST /v1/chat/completions`` (JSON or SSE stream), ``GET /v1/models``, ``GET /metrics``
(Prometheus text, a registry of its own per app), ``GET /healthz``. One chat call:

1. The body is read, then checked (400 for anything that is not a chat completion request),
   hashed and its prompt estimated.
2. ``GatewayGate.authorize_invocation`` decides the invocation from the headers and records the
   decision: the budget reserved for the estimated prompt and the output limit, and the audit
   entry, in one transaction before anything is sent.
   A refusal answers 401, 402 or 403 with an OpenAI-style error body, and has reserved nothing.
   The step blocks (store I/O, which may wait: for the store's write lock held by another
   connection, up to SQLite's busy timeout, or for a slow PostgreSQL), so it always runs in a
   worker thread, never on the event loop: ``/healthz``, ``/metrics``, the other connections
   and the shutdown go on meanwhile. Until review R89 a call that was the only one in flight
   was decided on the loop itself, to save the hand-off to a thread and back (0.34-0.47 ms in
   three loaded runs of benchmarks/dispatch_http.py: docs/gateway.md, "Review R89"), and a decision
   waiting for the lock froze the whole gateway for as long as it waited. The body's check,
   hash and estimate of step 1 run in the same worker step, before the decision: their work
   grows with the body (up to ``max_body_bytes``), and until review R91 they ran on the loop,
   where a caller with no credentials held it for seconds with each large body, before its 401.
   Such bodies hold worker threads instead: enough of them fill every one, and the other calls'
   steps wait for a worker (``Server-Timing``'s ``wait``, ``agentgate_gateway_worker_wait_seconds``).
   Nor is the loop wholly free while they are read: a parse or canonical encoding of a large
   body is one call in C that holds the GIL until it returns (``read_chat_request``), a
   fraction of a second each per multi-megabyte body.
3. The dispatcher routes the call to a backend that serves the model, with the call's output
   limit set to what was reserved; the answer (or the stream) goes back to the caller.
4. The usage the backend reports is charged and the outcome audited (``Gate.arun`` /
   ``GatewayGate.gated_stream``). The outcome is committed after the answer has gone out: by a
   worker thread as soon as no chat call is in flight, else carried by the next decision's
   transaction (the Gate's batching), so it is never on the critical path of the call it
   belongs to, and under load it costs no commit of its own.

``POST /v1/chat/completions`` is dispatched straight from the ASGI entry point, not through
Starlette's middleware and router (which serve the other endpoints); the answer is the same.

Around the app: the error answers (``_errors.py``), what is read from a request before it is decided
(``_request.py``), calls cut by their caller or by the shutdown (``_cuts.py``), the event stream
(``_stream.py``), and the uvicorn server (``_server.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import math
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from functools import partial
from typing import Any, ParamSpec, TypeVar

import orjson
from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentgate._bounded_http import LOST, STALLED
from agentgate._http_limits import positive_seconds
from agentgate._numbers import check_positive_finite
from agentgate._shown import quoted
from agentgate.audit.spans import caller_linked
from agentgate.capabilities import Call
from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch._policy import RoutingPolicy
from agentgate.dispatch._sse import _StreamUsage, carries_output
from agentgate.dispatch.backends import ChatChunk, ChatResult, Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.gateway._authority import APPROVAL_HEADER, GatewayDecision, GatewayGate
from agentgate.dispatch.gateway._client import INVOCATION_HEADER, PRIORITY_FIELD, priority_of
from agentgate.dispatch.gateway._cuts import (
    _GONE_UNSENT,
    STOPPED,
    _Cut,
    _cut_by_shutdown,
    _gone_before_sending,
    _left_reason,
    _spent,
    _stall_reason,
    _stopped_before_sending,
    _uncancel_all,
    _Unread,
    _Watch,
)
from agentgate.dispatch.gateway._errors import (
    INTERNAL_ERROR,
    ErrorResponse,
    _dispatch_error,
    _http_error,
    _internal_error,
    error_response,
)
from agentgate.dispatch.gateway._request import (
    BODY_TIMEOUT_S,
    MAX_BODY_BYTES,
    BodyTimedOut,
    BodyTooLarge,
    ChatRequest,
    _bearer,
    _declared_not_json,
    _declared_too_large,
    _read_body,
    _repeated_credentials,
    read_chat_request,
)
from agentgate.dispatch.gateway._stream import _error_event, _EventStream, _sse
from agentgate.dispatch.gateway._upstream import SENDING, SendMark, UpstreamPool
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import Router
from agentgate.errors import (
    AgentGateError,
    AnswerTooLarge,
    AuditError,
    BackendFailed,
    CallerGone,
    DispatchError,
    GatewayStopped,
    InputError,
    NoBackend,
    StoreError,
    UsageUnreadable,
)
from agentgate.gate._authorization import Authorization
from agentgate.gate._costs import _usage_counts, charged_counts, prompt_unreported
from agentgate.gate._outcomes import USAGE_UNREAD

_UNPARSED = Call("gateway:chat.completions", "generate")
"""The call recorded for a body too malformed to name a model."""
_CUT_UNDECIDED = "the gateway is shutting down: the call was cut before it was decided; nothing was charged"
"""The 503 ``shutting_down`` message of a call the shutdown cut before its decision began: its body
still arriving, or still being read, or its step waiting for a worker thread."""
_STOPPED_UNSENT = "the gateway stopped before the call was sent to a backend"
"""``GatewayStopped``'s message for a JSON call cut while it waited for a backend: released."""
_CUT_UNSENT = "the gateway is shutting down: the call was cut before it was sent; nothing was charged"
"""The 503 ``shutting_down`` message of a call the shutdown cut before any backend got it, JSON or
stream: released, an approval it used pending again."""
_log = logging.getLogger("agentgate.dispatch.gateway._app")  # the gateway's one logger (docs/gateway.md)
_TRACE_CONTEXT = TraceContextTextMapPropagator()
"""W3C Trace Context only: a caller's ``baggage`` is not read (nor, so, sent on to a backend)."""
P = ParamSpec("P")
T = TypeVar("T")


class _ModelRoute(Route):
    """``/v1/models/{model}`` for a model name that is not empty: ``/v1/models/`` is ``/v1/models``
    written with a trailing slash, a path not served (404 ``not_found``, any method), not a model
    the gateway does not serve (until review R85: 404 ``model_not_found``, "no model ''")."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE and not child["path_params"].get("model"):
            return Match.NONE, {}
        return match, child


class Gateway:
    """The gateway for one ``GatewayGate`` and one inventory; ``app`` is the ASGI application.

    The dispatcher (its connection pool and its scrape and health loops) runs on the app's event
    loop, started and stopped by the app's lifespan. The gate is the caller's to close.

    A call to a model whose policy entry declares ``slo.ttft_ms`` is routed under that SLO;
    ``slo_ttft_s`` is the SLO of calls to models that declare none (``None``: the dispatcher's own,
    ``DEFAULT_SLO_TTFT_S``).

    A chat request's body may be at most ``max_body_bytes`` (else 413) and must arrive within
    ``body_timeout_s`` of its head (else 408). Raises ``InputError`` naming the setting unless
    ``max_body_bytes`` is a positive whole number, ``body_timeout_s`` a positive finite number,
    and ``slo_ttft_s`` a positive finite number of seconds or ``None`` (as the dispatcher's own
    ``slo_ttft_s`` is checked: a bool is none).
    """

    def __init__(
        self,
        gate: GatewayGate,
        inventory: Inventory,
        *,
        router: RoutingPolicy | None = None,
        timeouts: Timeouts | None = None,
        slo_ttft_s: float | None = 2.0,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
            raise InputError(
                f"max_body_bytes must be a positive whole number of bytes, not {quoted(max_body_bytes)}"
            )
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = positive_seconds(body_timeout_s, "body_timeout_s")
        # Until review R85 unchecked: NaN, -1, 0 or "2" made a gateway whose every chat call was
        # decided, reserved and audited, then refused by the dispatcher (503 ``not_served``).
        # ``None`` goes on to the dispatcher, which reads it as its own SLO, as it did before R85.
        if slo_ttft_s is not None:
            check_positive_finite(slo_ttft_s, "slo_ttft_s")
        self.gate = gate
        self.inventory = inventory
        self.dispatcher = Dispatcher(inventory, router or Router(inventory), timeouts=timeouts)
        self.slo_ttft_s = slo_ttft_s
        self.models = sorted({m for b in inventory.backends for m in b.models})
        self._in_flight = 0
        """Chat calls being answered now, streams until their last event (event loop only)."""
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "agentgate_gateway_requests",
            "Chat completion requests answered, by HTTP status.",
            ["status"],
            registry=self.registry,
        )
        self._errors = Counter(
            "agentgate_gateway_errors",
            "Error answers of every path, by HTTP status and error code (a stream's error event: 200).",
            ["status", "code"],
            registry=self.registry,
        )
        self._decision_seconds = Histogram(
            "agentgate_gateway_decision_seconds",
            "Time to decide and record a call (authority, budget reservation, audit).",
            registry=self.registry,
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
        )
        self._worker_wait_seconds = Histogram(
            "agentgate_gateway_worker_wait_seconds",
            "Time a gate step (a chat call's reading and decision, an audited refusal) waited for a "
            "worker thread before it began (every one busy).",
            registry=self.registry,
            buckets=(0.0002, 0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self._tokens = Counter(
            "agentgate_gateway_tokens",
            "Tokens the backends reported for answered calls, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self._stalled = Counter(
            "agentgate_gateway_streams_stalled",
            "Streamed answers cut because the caller stopped reading (GatewayServer's stream_stall_s).",
            registry=self.registry,
        )
        self._lean_models: frozenset[str] = frozenset()
        """The models whose every backend is reached over the lean pool (which tells whether a
        call was sent: ``SENDING``); set by the lifespan."""
        self._flushing: asyncio.Task[None] | None = None
        """The worker thread's commit of finished calls' outcomes, while it runs (event loop only)."""
        self._starlette = Starlette(
            routes=[
                # Served by ``app`` directly; the route answers 405 to other methods.
                Route("/v1/chat/completions", self._chat_not_allowed, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                _ModelRoute("/v1/models/{model:path}", self._model, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/healthz", self._health, methods=["GET"]),
            ],
            lifespan=self._lifespan,
            # A path or method the gateway does not serve is an OpenAI-shaped error, as every
            # other answer is (the SDKs read its message and code), not Starlette's plain text.
            # An unexpected error is an OpenAI-shaped 500 too, never its text (``_Entry`` logs it).
            exception_handlers={
                HTTPException: self._counted_http_error,
                Exception: self._counted_internal_error,
            },
        )
        # A served path written with a trailing slash is a 404 like any path not served: Starlette
        # would redirect it (307) to a Location built from the caller's Host header, where a
        # client that follows it sends its body and credentials (until review R81).
        self._starlette.router.redirect_slashes = False
        self.app = _Entry(self._chat, self._starlette, self._chat_failed)
        """The ASGI application: chat completions directly, everything else through Starlette."""

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.dispatcher.start()
        # Chat calls to plain-http backends go over the gateway's lean keep-alive pool; https
        # backends, metric scrapes and health probes stay on the dispatcher's clients.
        upstream = UpstreamPool(connect_s=self.dispatcher.timeouts.connect_s)
        for client in self.dispatcher.clients.values():
            if client.backend.chat_url.startswith("http://"):
                client.transport = upstream
        clients = self.dispatcher.clients.values()
        self._lean_models = frozenset(
            m for m in self.models if all(c.transport is upstream for c in clients if m in c.backend.models)
        )
        try:
            yield
        finally:
            if self._flushing is not None:
                await asyncio.wait((self._flushing,))
            await self.dispatcher.aclose()
            await upstream.aclose()

    # --- small endpoints ------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _models(self, request: Request) -> Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "agentgate"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def _model(self, request: Request) -> Response:
        """``GET /v1/models/{model}`` (the SDKs' ``models.retrieve``): the model, or 404."""
        model = request.path_params["model"]
        if model not in self.models:
            answer = error_response(404, f"the gateway serves no model {model[:200]!r}", "model_not_found")
            self._count_error(answer.status_code, answer.code)
            return answer
        return JSONResponse({"id": model, "object": "model", "created": 0, "owned_by": "agentgate"})

    async def _metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def _counted_http_error(self, request: Request, exc: Exception) -> Response:
        answer = await _http_error(request, exc)
        self._count_error(answer.status_code, answer.code)
        return answer

    async def _counted_internal_error(self, request: Request, exc: Exception) -> Response:
        # Logged before the answer goes out (review R63): logged after it, by ``_Entry`` once
        # Starlette raised the error on, a reader of the answer could look at the log too early.
        _log.error(
            "agentgate gateway: an internal error on %s %s",
            request.method,
            request.url.path[:200],
            exc_info=exc,
        )
        answer = await _internal_error(request, exc)
        self._count_error(answer.status_code, answer.code)
        return answer

    # --- counting answers -----------------------------------------------------------------

    def _count_error(self, status: int, code: str) -> None:
        """Count an error answer (of any path, the HTTP protocol's refusals too: ``_server.py``).
        Both labels are bounded: the statuses the gateway answers, and its codes, which are
        literals of its own and of the gate's findings, never a caller's text."""
        self._errors.labels(status=str(status), code=code).inc()

    def _count_chat(self, response: Response) -> None:
        """Count a chat completion answer, and its error code if it is an error."""
        self._requests.labels(status=str(response.status_code)).inc()
        if isinstance(response, ErrorResponse):
            self._count_error(response.status_code, response.code)

    def _chat_failed(self, status: int) -> None:
        """Count a chat completion that an unexpected error ended (``_Entry``): answered 500
        ``internal_error``, or, its stream begun (200), ended with that error event."""
        self._requests.labels(status=str(status)).inc()
        self._count_error(status, "internal_error")

    # --- chat completions -----------------------------------------------------------------

    async def _chat_not_allowed(self, request: Request) -> Response:
        # Never reached: ``app`` takes every POST to this path before Starlette sees it.
        return error_response(405, "use POST", "method_not_allowed")

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A call is in flight until its answer (a stream: its last event) has been sent.
        self._in_flight += 1
        settled = False
        try:
            try:
                response, settled = await self._answer(Request(scope, receive))
            except (StoreError, AuditError) as exc:
                # Not even the decision (or a refusal) could be recorded: nothing was decided or
                # sent. One logged line and an OpenAI-shaped 503, not a traceback and a bare 500.
                _log.error("agentgate gateway: cannot record a decision: %s: %s", type(exc).__name__, exc)
                message = "the gateway cannot record decisions now; nothing was decided, sent or charged"
                response = error_response(503, message, "store_unavailable")
            await response(scope, receive, send)
        except ClientDisconnect:
            return  # gone while its body was being read: nothing was decided, nothing to answer
        finally:
            self._in_flight -= 1
            if settled:
                self._flush_when_idle()
        if STALLED in scope:
            _log.warning("agentgate gateway: %s", _stall_reason(scope))
            self._stalled.inc()
        self._count_chat(response)

    def _flush_when_idle(self) -> None:
        """Commit finished calls' outcomes in a worker thread if no chat call is in flight.

        While calls are in flight their outcomes are left pending, and the next decision's
        transaction carries them (one commit for both, under load).
        """
        if self._in_flight == 0 and (self._flushing is None or self._flushing.done()):
            self._flushing = asyncio.get_running_loop().create_task(asyncio.to_thread(self.gate.flush))
            self._flushing.add_done_callback(_log_failure)

    async def _blocking(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking gate step in a worker thread, never on the event loop.

        The step may wait on the store (its write lock held by another connection: SQLite's busy
        timeout, 30 s by default; a slow PostgreSQL); on the loop, that wait would stop every
        other connection, ``/healthz`` included (until review R89 the only call in flight was
        decided inline). A step begun runs to its end even if the task is cancelled meanwhile
        (the shutdown): what it recorded (an allow and its reservation) must be settled, so it
        is returned, the task left ``cancelling()`` for the caller to see (``_cut_by_shutdown``);
        a step made of parts ends before its next part instead (``_StepStart.goes_on``: a chat
        body being read is not decided). A step not begun when the task is cancelled (still waiting for a worker: every one busy)
        is called off, never begun, and the cancellation raised: nothing is decided or audited,
        and the shutdown does not wait for it (until review R90 it was never called off, so
        every call queued so was decided, allowed and audited while the gateway stopped, one
        after another, each maybe waiting out the store's busy timeout).
        """
        return await self._step(_StepStart(), partial(fn, *args, **kwargs))

    async def _step(self, start: _StepStart, fn: Callable[[], T]) -> T:
        """``_blocking``'s ``fn()``, its start told by ``start``: a step in parts may ask it
        whether it goes on to the next (``_StepStart.goes_on``)."""
        # ``asyncio.to_thread``'s future, but not a task: the event loop's own end cancels every
        # task, and a cancelled one would lose the step's result while the thread runs on.
        context = contextvars.copy_context()
        handed = time.perf_counter()
        step = asyncio.get_running_loop().run_in_executor(None, partial(start.run, partial(context.run, fn)))
        try:
            while True:
                try:
                    return await asyncio.shield(step)
                except asyncio.CancelledError:
                    if step.cancelled() or start.call_off():
                        step.cancel()  # its worker item, pending, is dropped; one taken up begins nothing
                        raise
        finally:
            if start.begun_at is not None:
                self._worker_wait_seconds.observe(start.begun_at - handed)

    async def _answer(self, request: Request) -> tuple[Response, bool]:
        """The answer to one chat call, and whether an allowed call's outcome was left to commit.

        The call's span starts a trace of its own, sampled by the gateway's tracer provider
        alone; a caller that sent W3C ``traceparent`` (and ``tracestate``) has it linked to its
        span (``caller_linked``: the header is unauthenticated, and until review R94 its sampled
        flag decided whether the call, a refusal included, had a span). A header the W3C
        propagator refuses (malformed, all-zero ids, ...) is ignored: no link."""
        if "traceparent" not in request.headers:
            return await self._answer_in_trace(request)
        token = otel_context.attach(
            caller_linked(_TRACE_CONTEXT.extract(request.headers, otel_context.Context()))
        )
        try:
            return await self._answer_in_trace(request)
        finally:
            otel_context.detach(token)

    async def _answer_in_trace(self, request: Request) -> tuple[Response, bool]:
        arrived = time.perf_counter()
        try:
            try:
                # Every Content-Encoding header counts: two of them are one list (RFC 9110, 5.3),
                # and ``identity`` then ``gzip`` is a gzipped body.
                encoding = ", ".join(request.headers.getlist("content-encoding")).strip().lower()
                if any(coding.strip() not in ("identity", "") for coding in encoding.split(",")):
                    raise InputError(
                        f"Content-Encoding {encoding[:40]!r} is not supported: send the body uncompressed"
                    )
                if (not_json := _declared_not_json(request.headers)) is not None:
                    raise InputError(not_json)
                if (too_large := _declared_too_large(request, self.max_body_bytes)) is not None:
                    # No ``100 Continue`` goes out (only reading the body sends it), and the
                    # connection closes: whether the body follows or not, nothing after this
                    # head can be read as a next request.
                    refusal = await self._refuse_large_body(too_large)
                    refusal.headers["connection"] = "close"
                    return refusal, False
                raw = await _read_body(request, self.max_body_bytes, self.body_timeout_s)
                received = time.perf_counter()
                start = _StepStart()
                read = await self._step(start, partial(self._read_and_decide, raw, request.headers, start))
            except BodyTimedOut as exc:
                return await self._refuse_slow_body(str(exc)), False
            except BodyTooLarge as exc:
                return await self._refuse_large_body(str(exc)), False
            except InputError as exc:  # its encoding or content type (a body read is refused in its step)
                return await self._refuse_body(str(exc)), False
        except asyncio.CancelledError:
            # The shutdown grace ran out before the call was decided (its body still arriving,
            # or waiting for a worker thread): nothing was decided, sent or charged.
            if not _cut_by_shutdown():
                raise
            return _shutting_down(_CUT_UNDECIDED), False
        if read is None:
            # The shutdown grace ran out while the body was read, in its worker step: the step
            # ended there, nothing decided or audited (``_read_and_decide``).
            _cut_by_shutdown()
            return _shutting_down(_CUT_UNDECIDED), False
        if isinstance(read, _MalformedBody):
            return _malformed(read.reason, read.param), False
        decided = time.perf_counter()
        self._decision_seconds.observe(decided - read.started)
        body, max_tokens, decision = read.request.body, read.request.max_tokens, read.decision
        if _cut_by_shutdown() and decision.allowed:
            # The shutdown grace ran out while the call was being decided: it is not sent, and
            # its reservation is released (its outcome audited ``GatewayStopped``).
            with contextlib.suppress(GatewayStopped):
                await self.gate.arun(decision.auth, _stopped_before_sending)
            return _shutting_down(_CUT_UNSENT), True
        if not decision.allowed:
            # A call behind an approval gate: the body carries what an approver signs
            # (`agentgate approval sign`), and the caller retries the same body with the approval.
            extra = decision.auth.approval_payload() if decision.auth.needs_approval else None
            headers = self._quota_headers(decision) if decision.auth.quota_exceeded is not None else None
            # Every refusal names its code (``GatewayGate``): none is made up here, so the codes
            # counted are the ones docs/gateway.md lists (until review R83 a fallback "refused").
            assert decision.code is not None
            answer = error_response(
                decision.status, decision.message, decision.code, headers=headers, extra=extra
            )
            return answer, False
        try:
            identity = decision.auth.identity
            tenant = self.gate.tenant_of(identity) if identity is not None else "default"
            payload = {**body, "max_tokens": max_tokens}
            payload.pop("max_completion_tokens", None)
            # agentgate's class name is not the backend's (vLLM's ``priority`` is an integer): the
            # dispatcher gets the class's rank instead, when the policy declares the class.
            payload.pop(PRIORITY_FIELD, None)
            route = self._route(tenant, priority_of(body), body.get("model"))
        except Exception:
            # An internal error before the call was sent (``_Entry`` logs it and answers 500):
            # released, its outcome audited, instead of a reservation held with no outcome
            # (until review R62). The error's own text stays out of the audit (it may carry secrets).
            # Nothing was sent: it did not start, an approval it used pending again (until
            # review R90b settled as started, the approval spent).
            with contextlib.suppress(DispatchError):
                await self.gate.arun(decision.auth, _failed_before_sending)
            raise
        headers = {"X-Agentgate-Audit-Index": str(decision.auth.audit_index)}
        if body.get("stream"):
            stream = await self._stream(decision, payload, route, headers, request.scope)
            return stream, True
        try:
            result = await self.gate.arun(
                decision.auth,
                lambda: self._backend_call(payload, route, request.scope),
                spent=_spent,
            )
        except CallerGone:
            # Nobody to answer: the connection is closed, so this goes nowhere (nginx's 499).
            return error_response(499, "the caller went away", "caller_gone"), True
        except GatewayStopped as exc:
            if str(exc) == _STOPPED_UNSENT:
                message = _CUT_UNSENT
            else:
                message = "the gateway is shutting down: the call was cut, and charged as reserved"
            return _shutting_down(message), True
        except AgentGateError as exc:
            return _dispatch_error(exc), True
        assert not isinstance(result, _Cut | _Unread)  # ``_spent`` raised for it
        answered = time.perf_counter()
        # The usage charged, as for a stream: none for a usage that cannot be the answer's.
        # A call charged its reservation (0 prompt tokens reported) counts none: until review R70
        # the counter added (0, n) for it.
        charged = _spent(result)
        if (why := _reserved_why(charged, decision.auth)) is not None:
            headers["X-Agentgate-Charged"] = f"reserved; {why}"
        elif charged is not None and charged is not USAGE_UNREAD:
            self._count_charged(decision.auth, charged)
        # Where the time went, for the caller's own measurements (W3C Server-Timing, milliseconds):
        # ``wait`` for a worker thread to take the reading and decision up (every one busy).
        begun = start.begun_at if start.begun_at is not None else received
        headers["Server-Timing"] = (
            f"read;dur={(received - arrived) * 1000:.3f}, wait;dur={(begun - received) * 1000:.3f}, "
            f"parse;dur={(read.started - begun) * 1000:.3f}, "
            f"decide;dur={(decided - read.started) * 1000:.3f}, "
            f"backend;dur={(answered - decided) * 1000:.3f}, "
            f"total;dur={(time.perf_counter() - arrived) * 1000:.3f}"
        )
        # The usage the call was charged, where it is less than the backend reported (until review
        # R67 the caller read the report: 100,000,000 prompt tokens where it was charged 4,000).
        # The ``agentgate`` field is agentgate's word, as a stream's: a call charged its
        # reservation says so (the header's words), and a backend's own field is never passed on
        # (until review R71 it was: a backend could tell the caller it was charged something else).
        usage = _as_charged(result.body.get("usage"), decision.auth)
        if usage is not None or why is not None or "agentgate" in result.body:
            passed = {k: v for k, v in result.body.items() if k != "agentgate"}
            if usage is not None:
                passed["usage"] = usage
            if why is not None:
                passed["agentgate"] = _charge_field(why)
            return JSONResponse(passed, headers=headers), True
        # The body as read, encoded again (``_as_read``), never the backend's bytes as sent: a key
        # it sent twice is the last copy, the one checked and charged.
        return Response(result.raw, media_type="application/json", headers=headers), True

    def _read_and_decide(
        self, raw: bytes, headers: Headers, start: _StepStart
    ) -> _Decided | _MalformedBody | None:
        """Read the chat body ``raw`` (``read_chat_request``), then decide it on the credentials
        of ``headers`` and record the decision (``_Decided``); ``None``, nothing decided or
        audited, where the step (``start``) was called off while the body was read (the shutdown
        grace ran out: ``_StepStart.goes_on``), as a decision not begun is (until a regression
        review of R91 the reading's step, begun, went on to decide or refuse the call during the
        shutdown: a malformed body was audited and answered 400, an allowed call reserved,
        released and audited ``GatewayStopped``, a call with no credentials answered 401). Refused 401
        ``ambiguous_credentials`` for a header that carries credentials sent twice (never resolved
        by order: a proxy in front may have checked the other one). A body refused
        (``InputError``) is audited as a refusal, nothing decided, in this same step, and
        answered by the caller (``_MalformedBody``, ``_malformed``): until a regression review of
        R91 it raised, and the refusal was handed to a worker again (``_refuse_body``), two
        hand-offs for one malformed body where one did before R91.

        Blocking, and one worker step (``_blocking``), never on the event loop: the decision may
        wait on the store, and the reading costs time that grows with the body, up to
        ``max_body_bytes``, for any caller, before it is authenticated. Until review R91 the
        reading ran on the loop: three bodies of 6.9 MB with no credentials each answered 401
        ``missing_invocation``, and ``/healthz`` waited 3 s meanwhile; it still holds the GIL, and
        so the loop, for a fraction of a second at a time (``read_chat_request``).
        """
        try:
            read = read_chat_request(raw)
        except InputError as exc:
            if not start.goes_on():
                return None
            reason = str(exc)
            self.gate.refuse(_UNPARSED, 400, "invalid_request", reason)
            return _MalformedBody(reason, exc.param if isinstance(exc, FieldError) else None)
        if not start.goes_on():
            return None
        started = time.perf_counter()
        if (ambiguous := _repeated_credentials(headers)) is not None:
            refusal = self.gate.refuse(read.call, 401, "ambiguous_credentials", ambiguous)
            return _Decided(read, started, refusal)
        decision = self.gate.authorize_invocation(
            _bearer(headers.get("authorization")),
            headers.get(INVOCATION_HEADER),
            read.call,
            (read.prompt, read.max_tokens),
            headers.get(APPROVAL_HEADER),
            prompt_most=read.prompt_most,
        )
        return _Decided(read, started, decision)

    def _route(self, tenant: str, priority: str | None, model: object = None) -> dict[str, Any]:
        """The dispatcher's routing arguments for a call of ``tenant`` in the class ``priority`` to
        ``model``: the class's ``rank`` as the dispatcher's ``priority`` when the policy declares
        the class, else the dispatcher's default; the model's ``slo.ttft_ms`` as its TTFT budget
        when the policy declares one, else ``slo_ttft_s``."""
        document = self.gate.policy.document
        spec = document.models.get(model) if isinstance(model, str) else None
        slo = spec.slo.ttft_ms if spec is not None and spec.slo is not None else None
        route: dict[str, Any] = {
            "tenant": tenant,
            "slo_ttft_s": self.slo_ttft_s if slo is None else slo / 1000,
        }
        declared = document.priority_classes.get(priority) if priority else None
        if declared is not None:
            route["priority"] = declared.rank
        return route

    async def _backend_call(
        self, payload: Mapping[str, Any], route: Mapping[str, Any], scope: Scope
    ) -> ChatResult | _Cut | _Unread:
        """The dispatcher's answer to a JSON chat call, ``_Cut`` if the call was cut meanwhile, or
        ``_Unread`` if its answer was larger than is read (``AnswerTooLarge``) or its usage is not
        token counts (``UsageUnreadable``): ``_spent`` then
        settles the call as charged its reservation, as a cut one.

        The backend request is cancelled as soon as the connection is lost (the protocol calls
        the ``ON_LOST`` hook): the engine aborts it and frees its slot, instead of generating a
        whole answer for nobody. The server's own cancellation (its shutdown grace is over) cuts
        it too. Either way ``_spent`` then settles the call as charged its reservation: what the
        backend produced before it was cut cannot be read; unless the call was cut before any
        backend got it (it waited in line for a slot, or for a backend to come back: the lean
        pool never began to send it, ``SENDING``), which raises ``CallerGone`` or
        ``GatewayStopped`` here instead, so that it is released, nothing charged. (The
        cancellation ends here: the handler answers, or finds its caller gone, at once.) A
        ``NoBackend`` or ``Shed`` (the call given up in line) that the lean pool never began to
        send is raised with ``sent`` ``False``: the call did not start (until review R90b it was
        settled as started, an approval it used spent).

        Raises ``BackendFailed`` for an answer that cannot be encoded again (``_as_read``).
        """
        with _Watch(scope) as watch:
            if watch.gone:  # while the call was being decided: nothing is sent, nothing charged
                raise CallerGone(_GONE_UNSENT, sent=False)
            mark = SendMark(payload)
            sending = SENDING.set(mark)
            lean = payload.get("model") in self._lean_models
            try:
                result = await self.dispatcher.chat(payload, **route)
            except (AnswerTooLarge, UsageUnreadable) as exc:
                return _Unread(exc)
            except NoBackend as exc:
                # Given up in line (its SLO over, no backend back in time, the dispatcher
                # closing) before any backend got it: it did not start.
                if not mark.sent and lean:
                    exc.sent = False
                raise
            except asyncio.CancelledError:
                if watch.task.uncancel() > 0:  # cancelled more than once: not this step's to end
                    raise
                if not mark.sent and lean:
                    if watch.gone:
                        raise CallerGone(_GONE_UNSENT, sent=False) from None
                    raise GatewayStopped(_STOPPED_UNSENT, sent=False) from None
                return _Cut(watch.gone)
            finally:
                SENDING.reset(sending)
        return _as_read(result)

    def _quota_headers(self, decision: GatewayDecision) -> dict[str, str] | None:
        """The headers of a call refused by a policy quota: ``Retry-After``, the seconds until its
        fixed window (aligned to the Unix epoch) rolls over, when a later window can hold the
        call; when none can (``Authorization.quota_never_fits``: the call alone is more than the
        quota's whole limit, which its message says), no ``Retry-After`` but
        ``x-should-retry: false``, which the OpenAI SDKs obey instead of retrying a call that is
        refused every time."""
        if decision.auth.quota_never_fits:
            return {"x-should-retry": "false"}
        quota = self.gate.policy.document.quotas.get(decision.auth.quota_exceeded or "")
        if quota is None:
            return None
        window = quota.window_s
        return {"Retry-After": str(max(1, math.ceil(window - time.time() % window)))}

    async def _refuse_body(self, reason: str) -> Response:
        """The answer to a chat request refused before its body is read (an encoding or a
        content type it cannot be read in): as ``_malformed``, audited as a refusal (nothing
        decided). A body refused once read is audited in its reading's own worker step
        (``_read_and_decide``)."""
        await self._blocking(self.gate.refuse, _UNPARSED, 400, "invalid_request", reason)
        return _malformed(reason, None)

    async def _refuse_large_body(self, reason: str) -> Response:
        """The answer to a call whose body is over ``max_body_bytes`` (read, or declared by a caller
        waiting for ``100 Continue``): 413 ``request_too_large``, audited as a refusal (nothing
        decided). Not 400: the request may be well formed, only too large (RFC 9110, 15.5.14;
        OpenAI's API answers an oversized request 413 too)."""
        await self._blocking(self.gate.refuse, _UNPARSED, 413, "request_too_large", reason)
        return error_response(413, reason, "request_too_large")

    async def _refuse_slow_body(self, reason: str) -> Response:
        """The answer to a call whose body did not arrive in time: 408 ``request_timeout``, audited
        as a refusal (nothing decided), and the connection closed (RFC 9110, 15.5.9; nginx's
        ``client_body_timeout``). Not 400: the request was not malformed, and a client may send it
        again (the OpenAI SDKs retry a 408, never a 400); the rest of its body is not waited for."""
        await self._blocking(self.gate.refuse, _UNPARSED, 408, "request_timeout", reason)
        answer = error_response(408, reason, "request_timeout")
        answer.headers["connection"] = "close"
        return answer

    async def _stream(
        self,
        decision: GatewayDecision,
        payload: Mapping[str, Any],
        route: Mapping[str, Any],
        headers: dict[str, str],
        scope: Scope,
    ) -> Response:
        if scope.get(LOST):  # gone while the call was being decided: nothing is sent or charged
            try:
                await self.gate.arun(decision.auth, _gone_before_sending)
            except CallerGone:
                return error_response(499, "the caller went away", "caller_gone")
        watch = _Watch(scope)
        handler = watch.task
        # As for a JSON call (``_backend_call``): a stream cut before its first chunk is charged
        # its reservation (a long prefill is the backend's work), unless the lean pool never
        # began to send it (it waited in line). The task that reads the backend is made in this
        # context: it shares the mark.
        mark = SendMark(payload)
        sending = SENDING.set(mark)
        lean = payload.get("model") in self._lean_models
        chunks = self.gate.gated_stream(
            decision.auth,
            self.dispatcher.stream(payload, **route),
            left=lambda: _left_reason(scope, handler),
            unsent=lambda: lean and not mark.sent,
            settled=lambda usage: self._count_settled(decision.auth, usage),
        )
        # Wait for the first chunk before answering, so that a call no backend can take gets an
        # HTTP error status rather than a 200 stream that fails. A caller that leaves meanwhile
        # (queued, or a long prefill) has its backend request cancelled at once.
        try:
            with watch:
                first: ChatChunk | None = await anext(chunks)
        except StopAsyncIteration:
            first = None
        except AgentGateError as exc:
            return _dispatch_error(exc)
        except asyncio.CancelledError:
            if watch.gone and watch.task.uncancel() == 0:
                await chunks.aclose()
                return error_response(499, "the caller went away", "caller_gone")
            # Only the server cancels a request's task otherwise: its shutdown grace ran out
            # before the first token. Its outcome is audited ``GatewayStopped`` and it is
            # answered 503, as a JSON call cut by the shutdown is, in the same words: charged as
            # reserved, or, for one no backend got (in line: settled by then, released), nothing
            # charged (until review R90b neither was said: its caller could not tell that its
            # approval was usable again).
            scope[STOPPED] = True
            _uncancel_all(watch.task)
            await chunks.aclose()
            if lean and not mark.sent:
                message = _CUT_UNSENT
            else:
                message = (
                    "the gateway is shutting down: the call was cut before its answer began, "
                    "and charged as reserved"
                )
            return _shutting_down(message)
        finally:
            SENDING.reset(sending)
        options = payload.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        events = self._events(chunks, first, str(payload["model"]), include_usage, decision.auth)
        return _EventStream(events, media_type="text/event-stream", headers=headers)

    async def _events(
        self,
        chunks: AsyncGenerator[ChatChunk, None],
        first: ChatChunk | None,
        model: str,
        include_usage: bool,
        auth: Authorization,
    ) -> AsyncGenerator[bytes, None]:
        ident = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())

        def event(
            choices: list[dict[str, Any]], usage: dict[str, int] | None = None, why: str | None = None
        ) -> bytes:
            body: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
            }
            if usage is not None:
                body["usage"] = usage
            if why is not None:
                body["agentgate"] = _charge_field(why)
            return _sse(body)

        reported = _StreamUsage()
        usage_sent = False
        role_sent = False
        said = False  # the last event sent carries the ``agentgate`` charge (``_charge_field``)
        delivered = False  # any output passed on (``GatewayGate._pump``'s rule for a failure)
        try:
            pending = first
            while pending is not None:
                reported.see(pending)
                delivered = delivered or carries_output(pending)
                if pending.event:
                    # The backend's own event, whole (reasoning, logprobs, ...: what a JSON answer
                    # passes on too), less the usage the gateway asked for and the caller did not.
                    passed = dict(pending.event)
                    passed.pop("agentgate", None)  # the gateway's own word (a backend's: not this call's)
                    if not include_usage:
                        passed.pop("usage", None)
                    elif (charged := _as_charged(passed.get("usage"), auth)) is not None:
                        passed["usage"] = charged  # what the call is charged, as a JSON answer's
                    usage_sent = usage_sent or passed.get("usage") is not None
                    # A usage the call is not charged (0 prompt tokens, or one that cannot count
                    # the output): the event says so (a usage event is the stream's last as a rule).
                    if (
                        passed.get("usage") is not None
                        and (reserved := _reserved_why(_stream_charged(reported), auth)) is not None
                    ):
                        passed["agentgate"] = _charge_field(reserved)
                    if (choices := passed.get("choices")) and not role_sent:
                        # OpenAI's first delta names the role; one an engine leaves out is added.
                        opening = {"role": "assistant", **(choices[0].get("delta") or {})}
                        passed["choices"] = [{**choices[0], "delta": opening}, *choices[1:]]
                        role_sent = True
                    if choices or passed.get("usage") is not None:
                        said = "agentgate" in passed
                        yield _sse(passed)
                elif pending.content or pending.finish_reason or pending.tool_calls:
                    said = False
                    delta: dict[str, Any] = {"content": pending.content}
                    if pending.tool_calls:
                        delta["tool_calls"] = list(pending.tool_calls)
                    if not role_sent:
                        delta["role"] = "assistant"
                        role_sent = True
                    yield event([{"index": 0, "delta": delta, "finish_reason": pending.finish_reason}])
                pending = await anext(chunks, None)
        except AgentGateError as exc:
            # Output already went out: the stream ends with an error event, as OpenAI's does.
            # The backend's own words stay in the gateway's log (names, addresses, its bytes).
            _log.warning("agentgate gateway: a stream broke after output: %s", exc)
            self._count_error(200, "backend_failed")
            # As a whole stream says it (below), where it is charged so (``GatewayGate._pump``:
            # one that failed before any output is released, nothing charged); the error event
            # stays the last (an SDK raises at it), so a comment alone.
            so_far = _stream_charged(reported)
            if so_far is None and isinstance(exc, UsageUnreadable):
                # A usage came that cannot be read: the caller is told so, as the audit log
                # says (until review R94 it was told that no usage was reported).
                so_far = USAGE_UNREAD
            ran = so_far is not None or delivered
            # (Charged the usage it reported, one covering its output: counted where it is
            # settled, ``_count_settled``.)
            if (why := _reserved_why(so_far, auth) if ran else None) is not None:
                yield _charged_comment(why)
            yield _error_event(
                "the backend failed during the answer; the answer is incomplete", "backend_failed"
            )
            return
        finally:
            await chunks.aclose()
        # The usage charged, not a stale one (reported before more output: the call is charged
        # its reservation, ``GatewayGate._pump``). Its tokens are counted where the call is
        # settled (``_count_settled``).
        why = _reserved_why(_stream_charged(reported), auth)
        if (usage := reported.usage) is not None:
            prompt, completion = charged_counts((usage.prompt_tokens, usage.completion_tokens), auth)
            if include_usage and not usage_sent:
                counts = {"prompt_tokens": prompt, "completion_tokens": completion}
                yield event([], {**counts, "total_tokens": prompt + completion}, why)
                said = True
        if why is not None:
            # The headers went out before the usage was known: the stream says what the call was
            # charged at its end (until review R70 it said nothing, its usage event the backend's).
            if include_usage and not said:
                yield event([], why=why)
            yield _charged_comment(why)
        yield b"data: [DONE]\n\n"

    def _count_settled(self, auth: Authorization, usage: tuple[int, int]) -> None:
        """Count a stream's tokens once it is settled with the ``usage`` its backend reported
        (``GatewayGate.gated_stream``'s ``settled``), however it ended: a whole stream, a broken
        one, or one whose caller left after its usage event (until review R71 the counter was
        counted at the end of the caller's stream, which that caller's leaving closes first);
        nothing for one charged its reservation (``_reserved_why``: 0 prompt tokens reported)."""
        if _reserved_why(usage, auth) is None:
            self._count_charged(auth, usage)

    def _count_charged(self, auth: Authorization, reported: tuple[int, int]) -> None:
        """Count the tokens a call charged its usage ``reported`` is charged (``charged_counts``),
        and log its overrun (``_say_overrun``): a JSON answer's, or a stream's once settled
        (``_count_settled``)."""
        charged = charged_counts(reported, auth)
        self._count_tokens(*charged)
        self._say_overrun(auth, charged)

    def _say_overrun(self, auth: Authorization, charged: tuple[int, int]) -> None:
        """Log one warning line when the usage ``charged`` (the counts the ``Gate`` charges an
        answered call, ``charged_counts``) costs more than the call's reservation in any unit:
        it is charged as reported while the budget holds it, its outcome saying ``the reported
        usage costs N UNIT, D over the R reserved``, but a reservation that runs short is a
        prompt estimate that does, which an operator watches for before budgets run out. Until
        review R70 the gateway's log said nothing of it. Nothing for a call charged its
        reservation (0 prompt tokens reported for a prompt sent: ``prompt_unreported``)."""
        if prompt_unreported(charged, auth):
            return
        cost = self.gate._priced(auth.call, charged)
        over = [
            f"{cost[unit]} {unit}, {cost[unit] - amount} over the {amount} reserved"
            for _, unit, amount in auth.reservations
            if cost.get(unit, amount) > amount
        ]
        if over:
            _log.warning(
                "agentgate gateway: audit entry %s: the reported usage costs %s",
                auth.audit_index,
                "; ".join(over),
            )

    def _count_tokens(self, prompt: int, completion: int) -> None:
        # Never raises: the counts come from a ``Usage``, non-negative integers by construction
        # (a backend reporting negative usage is a ``BackendFailed`` before the answer gets here),
        # so the counter cannot turn an answered, charged call into an error. The counts are the
        # ones charged (``charged_counts``; until review R67 the completion counted was the one
        # reported, over ``max_tokens`` or not).
        self._tokens.labels(kind="prompt").inc(prompt)
        self._tokens.labels(kind="completion").inc(completion)


def _as_read(result: ChatResult) -> ChatResult:
    """``result`` with ``raw`` its ``body`` encoded again (orjson, compact): what the caller is sent,
    the answer as the gateway read it, never the backend's bytes as sent. A key the backend sent
    twice in one object is read once, the last copy (orjson's reading, the one every check and the
    charge read): the bytes as sent carry both, and a reader that keeps the first copy saw another
    answer than the one checked and charged (until review R83 they were sent on: a first
    ``choices`` of 5,000 characters and a first ``usage`` of 2,000 tokens, the call charged the
    last ones, one completion token). Its cost is inside what ``benchmarks/dispatch_http.py``
    measures of the gateway's added time per call (docs/gateway.md).

    Raises ``BackendFailed`` for a body orjson does not encode: nested past 254 levels (it reads
    1,024), which no chat completion is (a token's top log-probabilities, its deepest field, are 6
    levels down). Raised within the call (``_backend_call``), it is settled as a backend failure,
    released, as the other answers that are not the JSON promised."""
    try:
        encoded = orjson.dumps(dict(result.body))
    except orjson.JSONEncodeError as exc:
        raise BackendFailed(
            f"{result.backend}: malformed chat completion: it cannot be encoded to pass on ({exc})"
        ) from None
    return dataclasses.replace(result, raw=encoded)


def _as_charged(usage: object, auth: Authorization) -> dict[str, Any] | None:
    """``usage`` (a backend's, as an answer or a usage event carries it) with the token counts the
    call is charged (``charged_counts``) and ``total_tokens`` their sum, its other fields kept;
    ``None`` when it is charged as reported (or is no usage of two counts: such an answer was
    refused, or is charged as reserved, before it gets here)."""
    if not isinstance(usage, Mapping):
        return None
    counts = _usage_counts((usage.get("prompt_tokens", 0), usage.get("completion_tokens")))
    if counts is None or (charged := charged_counts(counts, auth)) == counts:
        return None
    return {
        **usage,
        "prompt_tokens": charged[0],
        "completion_tokens": charged[1],
        "total_tokens": sum(charged),
    }


def _reserved_why(charged: tuple[int, int] | None, auth: Authorization) -> str | None:
    """Why an answered JSON call is charged its whole reservation, not the usage its answer
    carries (``charged``: ``_spent``'s), as the ``Gate`` settles it (``_spent``,
    ``prompt_unreported``);
    ``None`` when its usage is what it is charged, or it holds no reservation. Said in the
    answer's ``X-Agentgate-Charged`` header: until review R70 the caller read the backend's usage
    block alone (0 prompt tokens, or none) while its budget was charged the reservation."""
    if not auth.reservations:
        return None
    if charged is None:
        return "no usage was reported"
    if charged is USAGE_UNREAD:
        return "the usage reported cannot count the answer"
    if prompt_unreported(charged, auth):
        return "the backend reported 0 prompt tokens"
    return None


def _stream_charged(reported: _StreamUsage) -> tuple[int, int] | None:
    """What a stream is charged so far, as ``_reserved_why`` reads it: the counts of a usage that
    counts all its output, ``USAGE_UNREAD`` for one followed by more output or unable to count it
    (``_StreamUsage.stale``), ``None`` for none; as ``GatewayGate._pump`` settles it."""
    if (usage := reported.usage) is not None:
        return usage.prompt_tokens, usage.completion_tokens
    return USAGE_UNREAD if reported.stale else None


def _charge_field(why: str) -> dict[str, str]:
    """The ``agentgate`` field of a stream's last chunk when the call is charged its whole
    reservation, ``why`` saying why (``_reserved_why``): a JSON answer's ``X-Agentgate-Charged``,
    which a stream cannot carry (its headers go out before its usage is known). The OpenAI SDKs
    keep a chunk's unknown fields (``model_extra``) and read the rest as usual."""
    return {"charged": "reserved", "why": why}


def _charged_comment(why: str) -> bytes:
    """The SSE comment that a stream charged its whole reservation sends before its end (every
    SSE parser skips a comment): the JSON answer's ``X-Agentgate-Charged`` header as a line."""
    return f": x-agentgate-charged: reserved; {why}\n\n".encode()


@dataclasses.dataclass(frozen=True, slots=True)
class _Decided:
    """A chat call's body read and its call decided and recorded (``Gateway._read_and_decide``)."""

    request: ChatRequest
    """The body as read and checked."""
    started: float
    """When (``perf_counter``) its reading ended and its decision began."""
    decision: GatewayDecision
    """The decision, recorded."""


@dataclasses.dataclass(frozen=True, slots=True)
class _MalformedBody:
    """A chat body refused once read, its refusal audited (``Gateway._read_and_decide``)."""

    reason: str
    """What is wrong with it (the ``InputError``'s message)."""
    param: str | None
    """The field at fault, when one is (``FieldError``)."""


def _malformed(reason: str, param: str | None) -> Response:
    """The answer to a malformed chat request: 400 ``invalid_request``, ``param`` naming the
    field at fault when one is (OpenAI's ``param``)."""
    message = f"malformed chat completion request: {reason}"
    return error_response(400, message, "invalid_request", param=param)


class _StepStart:
    """Whether a gate step handed to a worker thread (``Gateway._blocking``) began there, or was
    called off first: whichever of ``run`` (in the worker) and ``call_off`` (on the event loop)
    comes first, under a lock, holds. A step begun may be made of parts (a chat body's reading,
    then its decision: ``Gateway._read_and_decide``): it asks ``goes_on`` before each part
    after the first, which a ``call_off`` meanwhile answers ``False``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._begun = False
        self._called_off = False
        self.begun_at: float | None = None
        """When (``perf_counter``) a worker thread took the step up, ``None`` while it has not
        (the time before it is the step's wait for a worker: ``worker_wait_seconds``)."""

    def run(self, step: Callable[[], T]) -> T:
        """``step()``, in the worker thread, unless it was called off: then nothing is run and
        ``CancelledError`` raised (its future was cancelled; nobody reads it)."""
        with self._lock:
            begun = self._begun = not self._called_off
            if begun:
                self.begun_at = time.perf_counter()
        if not begun:
            raise asyncio.CancelledError
        return step()

    def call_off(self) -> bool:
        """Call the step off: ``True`` if it had not begun (it never will), else ``False`` (it
        runs on, and its next part, if any, does not begin: ``goes_on``)."""
        with self._lock:
            self._called_off = True
            return not self._begun

    def goes_on(self) -> bool:
        """In the worker, between a step's parts: whether the next part may begin, ``False``
        once the step was called off."""
        with self._lock:
            return not self._called_off


async def _failed_before_sending() -> None:
    """The backend call of an allowed call that an internal error stopped before it was sent."""
    raise DispatchError("an internal error of the gateway stopped the call before it was sent", sent=False)


def _shutting_down(message: str) -> Response:
    """The answer to a call the server's shutdown cut (503 ``shutting_down``), closing the
    connection: a request pipelined behind it would otherwise be read and decided by a gateway
    whose dispatcher is closed (review R52's answers to calls cut before their decision let one
    through: an allow, then ``NoBackend``)."""
    answer = error_response(503, message, "shutting_down")
    answer.headers["connection"] = "close"
    return answer


def _log_failure(task: asyncio.Task[None]) -> None:
    # ``Gate.flush`` logs the outcomes a store error kept out; anything else is logged here.
    if not task.cancelled() and (exc := task.exception()) is not None:
        _log.error("agentgate gateway: committing outcomes failed: %s: %s", type(exc).__name__, exc)


class _Entry:
    """The ASGI entry point: ``POST /v1/chat/completions`` straight to ``chat``, the rest to ``other``.

    An unexpected error of either (any exception the gateway does not answer itself) is logged
    once, with its traceback, at ERROR, and answered without its text (which may carry secrets):
    an OpenAI-shaped 500 ``internal_error`` when no answer had begun; a stream that had begun ends
    with an error event instead. Until review R62 it reached uvicorn, which answered a plain-text
    ``Internal Server Error`` (or cut the stream) and logged it, twice for Starlette's routes.
    A chat call's is counted by ``chat_failed`` (given the status that went out); Starlette's
    routes log and count theirs in their exception handler, which answered it before Starlette
    raised it on to here (``_counted_internal_error``), so it is not logged again here.
    """

    def __init__(self, chat: ASGIApp, other: ASGIApp, chat_failed: Callable[[int], None]) -> None:
        self.chat = chat
        self.other = other
        self.chat_failed = chat_failed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.other(scope, receive, send)
            return
        app = (
            self.chat if scope["method"] == "POST" and scope["path"] == "/v1/chat/completions" else self.other
        )
        try:
            await app(scope, receive, send)
        except Exception:
            if app is not self.chat:  # Starlette's handler logged, answered and counted it
                return
            _log.exception(
                "agentgate gateway: an internal error on %s %s", scope["method"], scope["path"][:200]
            )
            answered = await _end_with_internal_error(send)
            if app is self.chat:
                # The only chat answer sent in pieces, so begun before the error, is a 200 stream.
                self.chat_failed(500 if answered else 200)


async def _end_with_internal_error(send: Send) -> bool:
    """Answer 500 ``internal_error`` if no answer began (and say so: ``True``), else end a begun
    one with an error event (only a stream is sent in pieces); never raises (the connection may be
    gone).

    How far the answer went is the server's to know: it refuses (raises for) a second start, and
    any message after the end. Nothing wraps ``send`` to track it, which would cost every message
    of every answer a call.
    """
    answer = error_response(500, INTERNAL_ERROR, "internal_error")
    try:
        await send({"type": "http.response.start", "status": 500, "headers": answer.raw_headers})
    except Exception:
        with contextlib.suppress(Exception):  # ended already: nothing more may be sent
            event = _error_event(INTERNAL_ERROR, "internal_error")
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return False
    with contextlib.suppress(Exception):
        await send({"type": "http.response.body", "body": answer.body, "more_body": False})
    return True
