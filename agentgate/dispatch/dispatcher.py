"""The dispatcher: routes each model call, sends it, and fails over when a backend fails.

It owns the pooled HTTP clients (``aiohttp`` for chat calls, the faster of the two there;
``httpx`` for scrapes and probes), one ``BackendClient`` per inventory backend and, for each
backend, two background loops (so that a backend whose probe hangs delays no other's): a
metrics scraper (every ``scrape_interval_s``; a backend whose metrics cannot be read is simply
left to the router's in-flight accounting once its last scrape is stale) and a health prober
(every ``health_interval_s``; a backend that fails its probe, or a request, is marked down at
once and skipped by the router, but not for a probe that fails while the backend answers calls:
a probe slower than ``probe_s`` on a busy backend; nor for one that failed late, the loop held
past ``probe_s``, before a second probe fails too; it is used again once it passes a probe after ``cooldown_s``, or
after the time its ``Retry-After`` asked for if that is longer: a 429 or 503 names it, read by
``backends.retry_after_s``, at most ``MAX_RETRY_AFTER_S``; it holds down every backend of that
URL, one engine under several names). A call that fails before it has produced any output is retried on another
backend, at most ``max_attempts`` times in all (not a call whose answer is ``AnswerTooLarge``: the
call asked for that much, and another backend would generate it again; its backend is not marked
down either; nor a call answered whole, or streamed before any output, with a usage that is not
token counts, ``UsageUnreadable``: it ran, and its backend is marked down); when every usable backend is marked down the
call waits up to ``recovery_wait_s`` for one to come back before it fails with ``NoBackend``. A
stream that fails after output has been delivered cannot be replayed transparently and ends
with ``BackendFailed``; chunks that carry no output (an engine's opening ``{"role": "assistant"}``)
are held back until the first that does (``MAX_HELD_CHUNKS``), so a stream failing after them
fails over as one failing before any chunk (until review R58 the role alone counted as delivered).

A backend that answers 401 or 403 rejected our credentials (``BackendRejectedCredentials``): like
any failure it is marked down and the call fails over, but passing ``/health`` does not bring it
back (vLLM serves ``/health`` without the key): the health loop probes it with
``accepts_credentials`` (``GET /v1/models`` with its key) instead, and it is used again once that
answers 200 after its cooldown. That probe does not prove the key is taken everywhere: some
engines serve ``/v1/models`` without it (llama.cpp's server exempts ``/health`` and
``/v1/models`` from ``--api-key``, as do hosted endpoints with a public model list), so a
backend that rejects our key can pass it at once. The cooldown of a backend that rejected our
credentials therefore doubles with each rejection since it last served a call (``cooldown_s``,
then twice, four times, ... up to ``MAX_REJECTED_COOLDOWN_S``): a wrong key costs one failed
attempt per cooldown, the cooldowns growing, not one per call.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import math
import ssl
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import Any

import aiohttp
import httpx
from opentelemetry import context as otel_context

from agentgate._names import check_session, check_tenant
from agentgate._numbers import check_finite_non_negative, check_positive_finite
from agentgate.dispatch._connector import chat_session
from agentgate.dispatch._engine_fields import check_engine_fields
from agentgate.dispatch._policy import AllowedBackend, RoutePlan, RouteRequest, RoutingPolicy, failed_over
from agentgate.dispatch.backends import (
    DEFAULT_OUTPUT_TOKENS,
    BackendClient,
    ChatChunk,
    ChatResult,
    Timeouts,
    _encode,
    carries_output,
    output_limit,
)
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.prefix import estimate_prompt_tokens, prompt_block_hashes
from agentgate.errors import (
    AnswerTooLarge,
    BackendFailed,
    BackendRejectedCredentials,
    DispatchError,
    InputError,
    NoBackend,
    Shed,
    UsageUnreadable,
)
from agentgate.policy import Policy, PolicyDocument

DEFAULT_SLO_TTFT_S = 2.0
"""The TTFT budget of a call whose caller names none and whose model declares none (seconds)."""

FREED_WAIT_S = 0.25
"""The longest a call waiting for a slot waits for one to free before it asks the router again
(well under ``router.WAITER_TIMEOUT_S``, after which a waiter that has not asked leaves the line)."""


MAX_HELD_CHUNKS = 64
"""The most chunks of a stream held back before its first output (``stream``): chunks that carry
none of the answer (the role alone, an empty delta, a usage) are passed on with the first that
carries some, so that a backend failing after them is failed over as one failing before any chunk
(nothing the caller can use was delivered). Past this many the stream counts as delivered: a
bound on what a backend chattering without output can make the dispatcher hold."""


MAX_REJECTED_COOLDOWN_S = 300.0
"""The longest a backend that keeps rejecting our credentials is left down before it is tried again
(its cooldown doubles with each rejection; see the module docstring)."""

LATE_PROBE_S = 0.1
"""How far past ``probe_s`` a failed health probe may end and still mark its backend down; one
that ends later says the event loop was late, and is sent again (``Dispatcher._health_loop``)."""


def model_slos(policy: Policy | PolicyDocument) -> dict[str, float]:
    """Model name -> TTFT budget in seconds, for every model of ``policy`` that declares
    ``slo.ttft_ms``: the ``model_slo_ttft_s`` of a ``Dispatcher`` that serves that policy's calls
    (``Dispatcher(inventory, router, model_slo_ttft_s=model_slos(gate.policy))``)."""
    document = policy.document if isinstance(policy, Policy) else policy
    return {
        name: spec.slo.ttft_ms / 1000
        for name, spec in document.models.items()
        if spec.slo is not None and spec.slo.ttft_ms is not None
    }


def _with_output_limit(payload: Mapping[str, Any], request: RouteRequest) -> Mapping[str, Any]:
    """``payload`` as sent to a backend: as it is when it names an output limit (``output_limit``);
    else with ``max_tokens`` set to the limit ``request`` was routed and its tenant debited for
    (``DEFAULT_OUTPUT_TOKENS``) and a ``max_completion_tokens`` of 0 or null left out, as the
    gateway sends every call. Until review R62 it was sent as it was, and vLLM reads ``max_tokens``
    0, null or absent as no limit (the rest of its context window): a call debited 256 tokens of
    its tenant's quota could generate 100,000 and more, bounded by no stream bound either."""
    if output_limit(payload) is not None:
        return payload
    sent = {name: value for name, value in payload.items() if name != "max_completion_tokens"}
    sent["max_tokens"] = request.max_output_tokens
    return sent


@functools.cache
def _trust_store() -> ssl.SSLContext:
    """The TLS context of every dispatcher's probe and scrape client in this process, built once:
    httpx built one per client, loading a CA bundle each time (45-60 ms of CPU per dispatcher
    started, although most inventories name ``http://`` backends only). The system's trust store,
    as the chat calls' (aiohttp's default context: OpenSSL's default paths, which ``SSL_CERT_FILE``
    and ``SSL_CERT_DIR`` can name): until review R79 the probes and scrapes trusted certifi's
    bundle instead, and a backend behind a private CA installed on the host answered its calls
    but failed every probe, marked down. Shared safely: these clients speak HTTP/1.1 only, so the
    ALPN list httpcore sets on it for each connection is always the same."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


class Dispatcher:
    """Routes and sends model calls over the inventory's backends. Use ``async with``.

    A call's TTFT budget (the router's SLO) is the ``slo_ttft_s`` its caller passes to ``chat`` or
    ``stream``; else its model's in ``model_slo_ttft_s`` (the policy's ``slo.ttft_ms``:
    ``model_slos``); else ``slo_ttft_s`` (2 s).

    Raises ``InputError`` for an interval or an SLO that is not positive and finite, a cooldown
    or recovery wait that is not finite and >= 0 (an integer too large for a float is neither:
    until review R84 it passed, and the health loop or every call raised ``OverflowError``), or
    a ``max_attempts`` that is not a whole number >= 1.
    """

    def __init__(
        self,
        inventory: Inventory,
        router: RoutingPolicy,
        *,
        timeouts: Timeouts | None = None,
        scrape_interval_s: float = 0.5,
        health_interval_s: float = 0.25,
        cooldown_s: float = 1.0,
        max_attempts: int = 3,
        recovery_wait_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        slo_ttft_s: float = DEFAULT_SLO_TTFT_S,
        model_slo_ttft_s: Mapping[str, float] | None = None,
    ) -> None:
        for name, value in (
            ("scrape_interval_s", scrape_interval_s),
            ("health_interval_s", health_interval_s),
            ("slo_ttft_s", slo_ttft_s),
            *((f"model_slo_ttft_s[{model!r}]", v) for model, v in (model_slo_ttft_s or {}).items()),
        ):
            check_positive_finite(value, f"dispatcher {name}")
        for name, value in (("cooldown_s", cooldown_s), ("recovery_wait_s", recovery_wait_s)):
            check_finite_non_negative(value, f"dispatcher {name}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            # Until review R66 ``max(1, max_attempts)``: 2.0 failed every call (an untyped
            # TypeError from ``range``), and 0 or NaN was one attempt without a word.
            raise InputError(f"dispatcher max_attempts must be a whole number >= 1, got {max_attempts!r}")
        self.inventory = inventory
        self.router = router
        self.timeouts = timeouts or Timeouts()
        self.scrape_interval_s = scrape_interval_s
        self.health_interval_s = health_interval_s
        self.cooldown_s = cooldown_s
        self.max_attempts = max_attempts
        self.recovery_wait_s = recovery_wait_s
        self.clock = clock
        self.slo_ttft_s = slo_ttft_s
        """The TTFT budget of a call whose caller and model name none (``slo_ttft``)."""
        self.model_slo_ttft_s: dict[str, float] = dict(model_slo_ttft_s or {})
        """Model name -> the TTFT budget of its calls when the caller names none: the policy's
        ``models.NAME.slo.ttft_ms`` (``model_slos``); ``Gateway`` reads its gate's policy itself."""
        self._http: httpx.AsyncClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self.clients: dict[str, BackendClient] = {}
        self._down_since: dict[str, float] = {}
        self._rejected: set[str] = set()
        """Backends marked down for rejecting our credentials (a subset of ``_down_since``)."""
        self._rejections: dict[str, int] = {}
        """Backend -> how many times it rejected our credentials since it last served a call."""
        self._answers: collections.Counter[str] = collections.Counter()
        """Backend -> how many calls it answered (a whole answer, or a stream's first output): a
        probe that fails while it answers calls does not mark it down (``_health_loop``)."""
        self._held_until: dict[str, float] = {}
        """Backend -> the ``clock`` time its ``Retry-After`` (a 429 or 503) keeps it down until."""
        self._live: set[str] = set()
        """The ids of the calls in flight (``_only``)."""
        self._waiting: dict[str, asyncio.Event] = {}
        """Request id -> the event that wakes it, for each call waiting for a slot."""
        self._tasks: list[asyncio.Task[None]] = []
        self._ids = itertools.count()
        self._closing = False
        self._closed: asyncio.Event | None = None
        """Set by ``aclose``: ends the pauses of calls waiting for a backend's recovery or a start."""
        self._busy = 0
        """Calls in progress that ``aclose`` can end, and waits for: not a stream while its consumer
        holds a chunk, nor a call talking over its owner's transport (``_out_of_reach``)."""
        self._idle: asyncio.Event | None = None
        """Set while no call is busy. Both events are made by ``start``, on the loop of the calls."""

    async def __aenter__(self) -> Dispatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the connection pool and start the scrape and health loops."""
        if self._http is not None:
            return
        self._closing = False
        self._closed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        # trust_env=False: straight to the backends, as the chat calls (aiohttp ignores the proxy
        # variables); through an HTTP_PROXY from the environment the probes and scrapes handed
        # the backend's key, in clear, to the proxy.
        self._http = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
            trust_env=False,
            verify=_trust_store(),
        )
        self._session = chat_session()
        self.clients = {
            b.name: BackendClient(b, self._http, self.timeouts, session=self._session)
            for b in self.inventory.backends
        }
        # One scrape loop and one health loop per backend: a backend whose probe hangs until
        # ``probe_s`` must not hold back what the others' probes found (a round that waited for the
        # slowest probe acted on every other backend's failure or recovery ``probe_s`` late).
        self._tasks = [
            *(
                asyncio.create_task(self._scrape_loop(c))
                for c in self.clients.values()
                if c.backend.metrics_url is not None
            ),
            *(asyncio.create_task(self._health_loop(name)) for name in self.clients),
        ]

    async def aclose(self) -> None:
        """Stop the loops and close every connection. Calls still in flight end with
        ``NoBackend`` or ``BackendFailed`` (their backends are not marked down for it) before it
        returns, those waiting for a slot or a backend's recovery too: its owner may stop the
        event loop next (``Gate.close`` does), and a call left waiting would then never end. A
        stream whose consumer holds a chunk ends when it asks for the next one."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # ``wait``: a cancellation of this call goes on (``await task`` under a suppressed
            # ``CancelledError`` swallowed it with the loop's own).
            await asyncio.wait(self._tasks)
        self._tasks = []
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._session is not None:
            for client in self.clients.values():
                client.cut()  # streams in flight fail now, not after ``idle_s`` of silence
            await self._session.close()
            self._session = None
        if self._closed is not None and self._idle is not None:
            self._closed.set()
            for event in self._waiting.values():
                event.set()
            await self._idle.wait()

    @contextlib.contextmanager
    def _in_progress(self) -> Iterator[None]:
        """Count a call busy (``aclose`` waits for it) while the block runs."""
        assert self._idle is not None  # made by ``start``, which ``_require_started`` checked
        self._busy += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()

    @contextlib.contextmanager
    def _only(self, request_id: str) -> Iterator[None]:
        """Hold ``request_id`` as in flight while the block runs; ``DispatchError`` if it already is:
        the router keys a call's accounting by its id, and a second call with one would leave the
        first's backend counted busy for good (a slot lost per repeat)."""
        if request_id in self._live:
            raise DispatchError(
                f"request id {request_id[:80]!r} is already in flight: give each call its own"
            )
        self._live.add(request_id)
        try:
            yield
        finally:
            self._live.discard(request_id)

    @contextlib.contextmanager
    def _handed_out(self) -> Iterator[None]:
        """Count a busy stream out while its consumer holds a chunk (``aclose`` cannot wait for that)."""
        assert self._idle is not None
        self._busy -= 1
        if not self._busy:
            self._idle.set()
        try:
            yield
        finally:
            self._busy += 1
            self._idle.clear()

    def _out_of_reach(self, client: BackendClient) -> contextlib.AbstractContextManager[None]:
        """Count a busy call out while it talks to ``client`` over its owner's transport (the
        gateway's pool): ``aclose`` cuts what goes over its own session, not that."""
        return self._handed_out() if client.transport is not None else contextlib.nullcontext()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the dispatcher closes meanwhile."""
        assert self._closed is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._closed.wait()

    # --- calls ---------------------------------------------------------------------------

    def route_request(
        self,
        payload: Mapping[str, Any],
        *,
        tenant: str = "default",
        priority: int = 1,
        slo_ttft_s: float | None = None,
        session: str | None = None,
        request_id: str | None = None,
    ) -> RouteRequest:
        """The ``RouteRequest`` for an OpenAI chat payload (its output limit: ``output_limit``, else
        ``DEFAULT_OUTPUT_TOKENS`` (256); its TTFT budget: ``slo_ttft_s``, else ``slo_ttft(model)``);
        raises ``DispatchError`` if it is malformed (not a mapping: until review R89 ``None``, a
        list or text was a bare ``AttributeError``; no model or messages, an output limit that is
        no whole number from 0 to ``MAX_USAGE_TOKENS``: ``output_limit``), ``InputError`` for a ``tenant`` that is no name
        (``check_tenant``) or a ``session`` that is no id (``check_session``), as ``Gate.dispatch``
        checks them: until review R57 ``chat`` and ``stream`` called directly took any tenant, each
        one a new token bucket and metric series, and any session, kept as a key of the router's
        affinity map. Also ``InputError`` for a ``priority`` that is no whole number >= 0 (a
        priority class's ``rank``, 0 first; a bool is none) or an ``slo_ttft_s`` that is neither
        ``None`` nor positive and finite, as the dispatcher's own ``slo_ttft_s`` is checked:
        until review R82 they went to the router unchecked (text failed with an untyped
        ``TypeError`` where the SLO could not be met, and passed where it could; a negative SLO
        was taken). ``FieldError`` (an ``InputError``) naming a body field the gateway refuses too
        (``check_engine_fields``): ``n``, ``best_of`` or ``n_cmpl`` other than 1 (several answers,
        where the tenant is debited for one), ``n_predict`` (an output limit other than the one
        debited), or an engine field that picks what the call was not decided on (``lora``,
        ``id_slot``, ``input_ids``, ``chat_template``, ...; until review R84 all of them passed),
        or holding a value JSON cannot write (``backends._encode``; until review R86 a bare
        ``TypeError`` or ``RecursionError`` once the call was routed and its tenant debited)."""
        check_tenant(tenant)
        check_session(session)
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
            raise InputError(
                f"priority must be a whole number >= 0 (a class's rank, 0 first), got {priority!r}"
            )
        if slo_ttft_s is not None:
            check_positive_finite(slo_ttft_s, "slo_ttft_s")
        if not isinstance(payload, Mapping):  # a JSON body that is no object
            raise DispatchError(
                "a chat call needs a model name and a non-empty list of messages: its payload is "
                f"{'None' if payload is None else 'a ' + type(payload).__name__}, not a mapping"
            )
        messages = payload.get("messages")
        model = payload.get("model")
        if not isinstance(messages, list) or not messages or not isinstance(model, str):
            raise DispatchError("a chat call needs a model name and a non-empty list of messages")
        # The tenant is debited prompt + max_tokens once, for one answer: a body asking for
        # several, or for another output limit, is refused as the gateway refuses it (until review
        # R84 ``n: 20`` was debited one answer's tokens, and its backend generated twenty).
        check_engine_fields(payload)
        # An entry that is not an object is no message (prompt_text passes over it), and a
        # message that cannot be written is named by its position in the caller's list (until
        # review R84 its position among the objects only).
        prefix_hashes = prompt_block_hashes(messages, self.router.block_tokens)
        max_tokens = output_limit(payload) or DEFAULT_OUTPUT_TOKENS
        # A value JSON cannot write is refused here, before anything is debited (after the
        # messages' own checks, which name the message).
        _encode(payload)
        if request_id is not None and not isinstance(request_id, str):
            raise DispatchError(f"request_id must be text, got {type(request_id).__name__}")
        if not request_id:
            request_id = f"req-{next(self._ids)}"
            while request_id in self._live:  # a caller's id of that form is in flight: the next one
                request_id = f"req-{next(self._ids)}"
        return RouteRequest(
            id=request_id,
            model=model,
            prompt_tokens=estimate_prompt_tokens(messages),
            max_output_tokens=max_tokens,
            prefix_hashes=prefix_hashes,
            tenant=tenant,
            priority=priority,
            slo_ttft_s=self.slo_ttft(model) if slo_ttft_s is None else slo_ttft_s,
            session=session,
            arrived_at=self.clock(),
        )

    def slo_ttft(self, model: str) -> float:
        """The TTFT budget (seconds) of a call to ``model`` whose caller names none: the model's
        own (``model_slo_ttft_s``, from the policy's ``slo.ttft_ms``), else ``slo_ttft_s``."""
        return self.model_slo_ttft_s.get(model, self.slo_ttft_s)

    def chat(
        self, payload: Mapping[str, Any], *, allowed: AllowedBackend | None = None, **route: Any
    ) -> Coroutine[Any, Any, ChatResult]:
        """Route and send a non-streaming call, failing over as the module docstring says: the
        coroutine to await for its answer.

        Every attempt carries the W3C trace context of the span current where ``chat`` is called
        (``BackendClient.chat``), taken when the coroutine is made: also when it is handed to
        another event loop to run (``Gate.dispatch`` runs it on the dispatcher's loop thread, whose
        own context holds no span of the caller's).

        Raises ``Shed`` / ``NoBackend`` when the router refuses or nothing can serve,
        ``BackendFailed`` after ``max_attempts`` failed tries, ``AnswerTooLarge`` at once (not
        retried) for an answer over ``backends.MAX_ANSWER_BYTES``, ``UsageUnreadable`` at once
        (not retried: the call ran; the backend is marked down) for an answer whose usage is not
        token counts, ``DispatchError`` for a bad request
        (or a ``request_id`` that a call in flight has) or a dispatcher that is not started (or
        already closed), ``InputError`` for a ``tenant``, ``session``, ``priority`` or
        ``slo_ttft_s`` out of its range, or a body field the gateway refuses too or that JSON
        cannot write (``FieldError``, ``route_request``); all when awaited, before the call is routed or its tenant debited.
        """
        return self._chat(payload, allowed, route, otel_context.get_current())

    async def _chat(
        self,
        payload: Mapping[str, Any],
        allowed: AllowedBackend | None,
        route: Mapping[str, Any],
        trace_context: otel_context.Context,
    ) -> ChatResult:
        self._require_started(sent=False)
        request = self.route_request(payload, **route)
        payload = _with_output_limit(payload, request)
        with self._only(request.id), self._in_progress():
            errors: list[str] = []
            for _ in range(self.max_attempts):
                plan = await self._plan(request, allowed, errors)
                assert plan.backend is not None
                client = self.clients[plan.backend]
                try:
                    self._require_started(sent=bool(errors))  # it may have closed while the call waited
                    with self._out_of_reach(client):
                        result = await client.chat(payload, trace_context=trace_context)
                except UsageUnreadable as exc:
                    # The backend ran the call and answered it whole, its usage garbage: marked
                    # down, but the call is not sent again (until review R68 the next backend ran
                    # it again, and the caller was charged nothing for either run).
                    self._failed(request.id, plan.backend, exc, errors)
                    raise
                except BackendFailed as exc:
                    self._failed(request.id, plan.backend, exc, errors)
                    request = failed_over(request, plan)  # its tenant paid once (``RouteRequest.paid``)
                    continue
                except AnswerTooLarge:
                    # The backend generated what the call asked for; the call's doing, not the
                    # backend's: neither retried nor marked down (until review R57 a
                    # ``BackendFailed``: each of ``max_attempts`` backends generated it again and
                    # was marked down, and the gateway charged nothing).
                    self._rejections.pop(plan.backend, None)  # it took our key
                    self._finished(request.id)
                    raise
                except BaseException:
                    self._finished(request.id)
                    raise
                self._rejections.pop(plan.backend, None)  # it took our key: the next rejection starts over
                self._answers[plan.backend] += 1
                self.router.first_token(request.id, self.clock())
                self._finished(request.id)
                return result
            raise BackendFailed(
                f"call failed on {self.max_attempts} attempts: " + "; ".join(errors),
                retry_after_s=self._held_for(request.model, allowed),
            )

    async def stream(
        self, payload: Mapping[str, Any], *, allowed: AllowedBackend | None = None, **route: Any
    ) -> AsyncIterator[ChatChunk]:
        """Route and stream a call; fails over only before its first output has been yielded:
        chunks that carry none (``carries_output``: no character of the answer, such as the role
        alone, an empty delta, a tool call fragment that is its index alone, a usage) are
        held back and passed on with the first that carries some (or at the stream's end), at
        most ``MAX_HELD_CHUNKS`` of them; a failure meanwhile fails over and they are dropped, so
        the caller sees the chunks of one backend only (not ``UsageUnreadable``, a usage that is
        not token counts: the backend ran the call, and it is sent to no other). Every attempt carries the trace context
        of the span current where the stream is first read.

        Raises as ``chat`` does; a failure after output was delivered raises ``BackendFailed``
        with ``after_output`` (until review R68 without: ``Gate.run`` released the call, the
        output delivered free), a ``UsageUnreadable`` for a usage that is not token counts
        (until review R94 a plain ``BackendFailed``).
        """
        self._require_started(sent=False)
        request = self.route_request(payload, **route)
        payload = _with_output_limit(payload, request)
        with self._only(request.id), self._in_progress():
            errors: list[str] = []
            for _ in range(self.max_attempts):
                plan = await self._plan(request, allowed, errors)
                assert plan.backend is not None
                delivered = False
                held: list[ChatChunk] = []  # the chunks not yet passed on (``MAX_HELD_CHUNKS``)
                client = self.clients[plan.backend]
                own = client.transport is None  # over the dispatcher's own session, which ``aclose`` cuts
                try:
                    self._require_started(sent=bool(errors))  # it may have closed while the call waited
                    with self._out_of_reach(client):
                        async for chunk in client.stream(payload):
                            held.append(chunk)
                            if not delivered:
                                if not carries_output(chunk) and len(held) < MAX_HELD_CHUNKS:
                                    continue  # nothing the caller can use yet: a failure fails over
                                self._first_output(request.id, plan.backend)
                                delivered = True
                            ready, held = held, []
                            for out in ready:
                                with self._handed_out() if own else contextlib.nullcontext():
                                    yield out
                        if held:  # an answer of no output at all (a finish reason, a usage)
                            self._first_output(request.id, plan.backend)
                            delivered = True
                            for out in held:
                                with self._handed_out() if own else contextlib.nullcontext():
                                    yield out
                except BackendFailed as exc:
                    self._failed(request.id, plan.backend, exc, errors)
                    if isinstance(exc, UsageUnreadable) and not delivered:
                        # The backend ran the call (as ``chat``'s): sent to no other. Until
                        # review R69 the next backend ran it again, the caller charged for none.
                        raise
                    if delivered:
                        broke = f"stream from {plan.backend} broke after output: {exc}"
                        # Its kind kept: a usage that cannot be read is told so to the caller
                        # (until review R94 the gateway's said "no usage was reported").
                        kind = UsageUnreadable if isinstance(exc, UsageUnreadable) else BackendFailed
                        raise kind(broke, after_output=True) from None
                    request = failed_over(request, plan)  # its tenant paid once (``RouteRequest.paid``)
                    continue
                finally:
                    self._finished(request.id)
                return
            raise BackendFailed(
                f"call failed on {self.max_attempts} attempts: " + "; ".join(errors),
                retry_after_s=self._held_for(request.model, allowed),
            )

    def _first_output(self, request_id: str, backend: str) -> None:
        """A stream's first output has come from ``backend``: its first token for the router, and
        the backend took our key (as a ``chat`` answered)."""
        self.router.first_token(request_id, self.clock())
        self._rejections.pop(backend, None)
        self._answers[backend] += 1

    def _require_started(self, *, sent: bool = True) -> None:
        """Raise unless started and not closing. ``sent``: whether a backend may have got the call
        by now (its ``NoBackend``'s; until a regression review of R90c always true, so a call
        refused by a closed dispatcher before any attempt used its approval up)."""
        if self._closing:
            closed = NoBackend("the dispatcher is closed")
            closed.sent = sent
            raise closed
        if self._session is None:
            raise DispatchError(
                "the dispatcher is not started: use `async with Dispatcher(...)` or `await start()`"
            )

    async def _plan(
        self, request: RouteRequest, allowed: AllowedBackend | None, errors: list[str]
    ) -> RoutePlan:
        try:
            return await self._wait_for_plan(request, allowed, errors)
        except BaseException as exc:
            # A call that gives up (cancelled, shed, no backend) leaves the router's line at once,
            # and those a slot it was owed now goes to are woken.
            self.router.withdraw(request.id)
            self._slot_freed()
            if isinstance(exc, NoBackend) and not errors:
                # Before any attempt (each failed one is in ``errors``): no backend got the call,
                # over whatever transport. Until a regression review of R90b only the gateway
                # said so, and only for a model whose backends are all plain http.
                exc.sent = False
            raise

    async def _wait_for_plan(
        self, request: RouteRequest, allowed: AllowedBackend | None, errors: list[str]
    ) -> RoutePlan:
        recovery_deadline = self.clock() + self.recovery_wait_s
        while True:
            self._require_started()  # closed while the call waited: it ends now, not after its wait
            try:
                plan = self.router.route(request, self.clock(), allowed)
            except NoBackend as exc:
                # Everything we may use is marked down: wait (bounded) for the health loop to
                # bring one back rather than fail a call over a transient blip. Only a backend
                # this call could use is worth waiting for (not one of another model's, nor one
                # that its own ``Retry-After`` holds down past the wait).
                if (
                    not isinstance(exc, Shed)
                    and self.clock() < recovery_deadline
                    and self._could_come_back(request, allowed, recovery_deadline)
                ):
                    await self._pause(self.health_interval_s)
                    continue
                held = self._held_for(request.model, allowed)
                if errors:
                    # After failed attempts the failures are the cause, even of a shed (the SLO
                    # budget went on them): no backend could serve it (503), not "slow down" (429).
                    raise NoBackend(f"{exc} (after: {'; '.join(errors)})", retry_after_s=held) from None
                if held is not None:
                    raise NoBackend(str(exc), retry_after_s=held) from None
                raise
            if plan.action == "dispatch":
                return plan
            if plan.until_freed:
                # Asking again is worth it once a slot frees (or a backend comes back): wait for
                # that, within the SLO budget left and FREED_WAIT_S (the router lets a waiter that
                # has not asked for WAITER_TIMEOUT_S leave its line).
                freed = self._waiting[request.id] = asyncio.Event()  # before any await
                left = request.slo_ttft_s - max(0.0, self.clock() - request.arrived_at)
                try:
                    # ``asyncio.timeout``, not ``wait_for``: on Python 3.11 ``wait_for`` returns
                    # the event's result when the slot frees in the loop turn that cancels this
                    # task, swallowing the cancellation (the call was then sent anyway).
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(0.0, min(FREED_WAIT_S, left))):
                            await freed.wait()
                finally:
                    self._waiting.pop(request.id, None)
            else:
                # Its SLO met nowhere, it turned down the free slot it was offered: the router
                # gives it to the next in line, who is woken to take it (until review R92 the
                # slot stayed idle meanwhile).
                self._slot_freed()
                await self._pause(plan.wait_s)

    def _could_come_back(self, request: RouteRequest, allowed: AllowedBackend | None, by: float) -> bool:
        """Whether a backend that serves ``request``'s model and that ``allowed`` admits is down,
        and not held down past the ``clock`` time ``by`` by its ``Retry-After``."""
        return any(
            b.name in self._down_since
            and self._held_until.get(b.name, -math.inf) < by
            and (allowed is None or allowed(b))
            for b in self.inventory.backends_serving(request.model)
        )

    def _held_for(self, model: str, allowed: AllowedBackend | None) -> float | None:
        """When every backend that serves ``model`` and that ``allowed`` admits is down and held
        down by its ``Retry-After``, the seconds until the first of them may be used again (the
        health loop brings none back sooner); else ``None`` (one is up, or down for a failure
        that named no time: when it is tried again is its next passing probe's)."""
        until = [
            max(held, self._down_since[b.name] + self._cooldown(b.name))
            if b.name in self._down_since and (held := self._held_until.get(b.name)) is not None
            else -math.inf
            for b in self.inventory.backends_serving(model)
            if allowed is None or allowed(b)
        ]
        now = self.clock()
        if not until or min(until) <= now:
            return None
        return min(until) - now

    def _finished(self, request_id: str) -> None:
        """The request holds no slot any more: tell the router, and wake the calls waiting for one."""
        self.router.finished(request_id, self.clock())
        self._slot_freed()

    def _slot_freed(self) -> None:
        """Wake the waiting calls the free slots now go to (``router.due``), or all of them when
        the router keeps no line; the others ask again within ``FREED_WAIT_S`` anyway."""
        due = self.router.due(self.clock())
        for name in self._waiting if due is None else due:
            event = self._waiting.get(name)
            if event is not None:
                event.set()

    def _failed(self, request_id: str, backend: str, exc: BackendFailed, errors: list[str]) -> None:
        errors.append(str(exc))
        self._finished(request_id)
        if not self._closing:  # a connection cut by aclose is no fault of the backend's
            newly = self._mark_down(backend)
            if exc.retry_after_s is not None:
                # The engine said how long it wants to be left alone: under every name it is
                # listed by (backends that share its URL are one engine), not only this one.
                until = self.clock() + exc.retry_after_s
                engine = self.inventory.backend(backend).engine_key
                for alias in self.inventory.backends:
                    if alias.engine_key == engine:
                        self._mark_down(alias.name)
                        self._held_until[alias.name] = max(until, self._held_until.get(alias.name, until))
            if isinstance(exc, BackendRejectedCredentials):
                self._rejected.add(backend)
                if newly:  # calls in flight when it went down are the same rejection, not more
                    self._rejections[backend] = self._rejections.get(backend, 0) + 1

    # --- background loops ----------------------------------------------------------------

    def _mark_down(self, backend: str) -> bool:
        """Mark ``backend`` down from now, unless it is down already; True if it was up."""
        if backend in self._down_since:
            return False
        self._down_since[backend] = self.clock()
        self.router.mark_down(backend)
        return True

    def _cooldown(self, backend: str) -> float:
        """How long ``backend``, marked down, stays down at least: ``cooldown_s``; while it is down
        for rejecting our credentials, doubled for each such rejection since it last served a
        call, at most ``MAX_REJECTED_COOLDOWN_S`` (or ``cooldown_s`` if that is longer)."""
        if backend not in self._rejected:
            return self.cooldown_s
        doublings = min(self._rejections.get(backend, 1) - 1, 32)
        return min(self.cooldown_s * 2.0**doublings, max(self.cooldown_s, MAX_REJECTED_COOLDOWN_S))

    # ``BackendClient.scrape`` and ``health`` turn every failure they know into ``BackendFailed``
    # and ``False``; the loops also survive one they do not (``return_exceptions``): a loop that
    # stopped would leave its backend unprobed and, marked down, down for good.

    async def _scrape_loop(self, client: BackendClient) -> None:
        while True:
            await asyncio.gather(self._scrape(client), return_exceptions=True)
            await asyncio.sleep(self.scrape_interval_s)

    async def _scrape(self, client: BackendClient) -> None:
        with contextlib.suppress(BackendFailed):
            self.router.observe(client.backend.name, await client.scrape(self.clock()))

    async def _health_loop(self, name: str) -> None:
        """Probe ``name`` every ``health_interval_s``: a failed probe marks it down, unless it
        answered a call while the probe was out (a probe slower than ``probe_s`` on a backend
        busy serving calls: until review R62 one such probe took a serving backend out of the
        rotation, and the calls routed to it only then failed over or waited); a backend down
        comes back after its cooldown once a probe passes.

        A probe that failed after longer than ``probe_s`` allows (``LATE_PROBE_S`` past it) is
        sent again at once, and that one judges: the loop was late (held by other work, or the
        process starved of CPU), and the probe's timeout and the backend's answer were both due
        when it ran again; the timeout won. Until review R72 such a probe marked a healthy
        backend down, and calls found no backend while the gateway was loaded. A backend whose
        probes hang is marked down one probe later for it, never more."""
        loop = asyncio.get_running_loop()
        late_before = False
        while True:
            answered = self._answers[name]
            probe = self._credentials_probe(name) if name in self._rejected else self.clients[name].health()
            sent = loop.time()
            (ok,) = await asyncio.gather(probe, return_exceptions=True)
            late = loop.time() - sent > self.timeouts.probe_s + LATE_PROBE_S
            if ok is not True and late and not late_before:
                late_before = True
                continue  # its verdict is the loop's, not the backend's: ask the backend again
            late_before = False
            if ok is not True:
                if self._answers[name] == answered:
                    self._mark_down(name)
            elif (
                name in self._down_since
                and self.clock() - self._down_since[name] >= self._cooldown(name)
                and self.clock() >= self._held_until.get(name, -math.inf)
            ):
                del self._down_since[name]
                self._held_until.pop(name, None)
                self._rejected.discard(name)
                self.router.mark_up(name)
                self._slot_freed()
            await asyncio.sleep(self.health_interval_s)

    async def _credentials_probe(self, backend: str) -> bool:
        """The health probe of a backend down for rejecting our credentials: its key is read again
        from its source (a rotated key file: the new key's backoff starts over), then
        ``accepts_credentials``."""
        client = self.clients[backend]
        if await asyncio.to_thread(client.reload_key):
            self._rejections.pop(backend, None)
        return await client.accepts_credentials()

    def is_down(self, backend: str) -> bool:
        """True while the backend is marked down."""
        return backend in self._down_since

    def rejected_credentials(self, backend: str) -> bool:
        """True while the backend is marked down for rejecting our credentials (401/403)."""
        return backend in self._rejected
