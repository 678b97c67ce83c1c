"""The simulated engine behind a real OpenAI-compatible HTTP server on loopback.

``SimServer`` runs one ``Engine`` (the same one the discrete-event replay uses) in a uvicorn
server on its own thread and event loop. Engine steps take their simulated duration times
``time_scale`` of wall-clock time, so tests run fast. Endpoints:

- ``POST /v1/chat/completions``: OpenAI chat completions, streaming (SSE) or not; the prompt is
  estimated at four characters per token and ``max_tokens`` tokens are generated, one choice per
  request (``n`` or ``best_of`` other than 1 is refused). A body declared as anything but JSON
  (``Content-Type``: ``_not_json``), a malformed body, or one whose prompt plus ``max_tokens``
  exceeds ``max_model_len`` (the lesser of the argument, default 131072, and the KV capacity), is
  a 400 with an OpenAI error body
  (``_request.py``); a body over ``MAX_BODY_BYTES`` (16 MiB) is a 413 as soon as it passes the
  limit (the rest is not buffered), and one that has not arrived in full ``body_timeout_s``
  (default 30) seconds after its headers is a 408. A ``model`` other than ``model_name`` is a
  404 of type ``"not_found_error"``, the name quoted to 60 characters.
  A request head (line and headers) must arrive within ``head_timeout_s`` (default 10) seconds and
  be at most ``max_head_bytes`` (default 4 MiB), else a bare 408 or 431 and the connection is
  closed. The server speaks the bounded HTTP protocol the gateway also speaks
  (``agentgate/_bounded_http.py``) with limits of its own, modelled on a vLLM server (uvicorn
  with httptools): 4 MiB of head is vLLM's own bound (``--h11-max-incomplete-event-size``); an
  answer waits for a caller that stops reading for ever (``stall_s=None``), as uvicorn's does;
  the 10 s for a head and for the rest of a body answered before it all came
  (``unread_body_s``) are the simulator's, which vLLM does not have (uvicorn waits for both for
  ever), so that a test's client sending its head a byte at a time ends. A non-streaming request
  whose client hangs up is cancelled in the engine.
- ``GET /v1/models``: the served model.
- ``GET /metrics``: Prometheus text with vLLM's metric names, refreshed every ``scrape_lag_s``
  simulated seconds (vLLM's own gauges also trail the engine).
- ``GET /health``: 200 while serving.

Any other path is a 404, and a method an endpoint does not take a 405, each with an OpenAI error
body whose type is the status's phrase (``"Not Found"``), as vLLM answers them. A served path
with a trailing slash is a 307 redirect to the path without it, as vLLM's FastAPI app answers it
(Starlette's and FastAPI's ``redirect_slashes``, kept on here as vLLM keeps it).

With an ``api_key`` the ``/v1/*`` endpoints answer 401 (an OpenAI error body) to a request
without ``Authorization: Bearer <api_key>``, as vLLM and SGLang started with ``--api-key`` do;
``/health`` and ``/metrics`` stay open, as theirs do. ``authorizations`` counts the
``Authorization`` headers the ``/v1/*`` endpoints received, per path (``None``: none), so that
tests can check what a client sent: the first ``AUTHORIZATIONS_KEPT`` distinct ones, then any
other under ``OTHERS`` (a server that counted every distinct header grew without bound). Both
keep each value up to ``KEPT_HEADER_CHARS`` (8,192) characters, a longer one cut and marked. ``trace_headers`` keeps, for each of the latest
``TRACE_HEADERS_KEPT`` chat requests, the trace context headers it carried (``traceparent``,
``tracestate``, ``baggage``: what a vLLM or SGLang server started with OTLP tracing reads to join
the caller's trace), so that tests can check that a call's trace reaches the backend.

Faults for tests: ``fault = "hang"`` (accept and never answer), ``"garbage"`` (a 200 with bytes
that are not JSON or SSE), ``"error"`` (HTTP 500), ``"metrics_down"`` (``/metrics`` answers 503);
``"none"`` serves again; any other name is refused (``InputError``). ``kill()`` closes the port and
drops every connection, ``revive()`` serves again on the same port.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import itertools
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal, get_args

import uvicorn
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentgate._http_limits import HttpLimits, port_number
from agentgate._names import _unicode
from agentgate._numbers import finite
from agentgate._shown import character_named, quoted, shown
from agentgate.dispatch.prefix import CHARS_PER_TOKEN, block_hashes
from agentgate.errors import DispatchError, InputError
from agentgate.sim._engine import Engine, EngineConfig, SimRequest, check_engine_arguments
from agentgate.sim._latency import LLAMA_8B_H100, LatencyModel
from agentgate.sim._request import parse_chat

DEFAULT_MAX_MODEL_LEN = 131_072
"""Llama 3.1's context length, vLLM's default ``max_model_len`` for it."""

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest chat body read; far above any prompt within the context limit, so memory stays bounded."""

HEAD_TIMEOUT_S = 10.0
"""Default most wall-clock seconds a request head may take to arrive (``SimServer(head_timeout_s=...)``);
a slower one is answered 408 and its connection closed. The simulator's own bound: vLLM (uvicorn)
waits for a head for ever."""
MAX_HEAD_BYTES = 4 * 1024 * 1024
"""Default most bytes of a request head (``SimServer(max_head_bytes=...)``), vLLM's own
(``--h11-max-incomplete-event-size``, 4 MiB); a larger one is answered 431 and its connection closed."""
STALL_S: float | None = None
"""Default seconds an answer waits for a caller that reads none of it (``SimServer(stall_s=...)``):
for ever, as vLLM's uvicorn waits (the gateway cuts such a caller after 30 s)."""
UNREAD_BODY_S = 10.0
"""Default seconds for the rest of a body answered before it all came (a 413), read and dropped,
before the connection is closed (``SimServer(unread_body_s=...)``). The simulator's own bound."""

BODY_TIMEOUT_S = 30.0
"""Default most wall-clock seconds a chat body may take to arrive in full, from when its headers
were read (``SimServer(body_timeout_s=...)``); a body slower than that is answered 408."""

MIN_TIME_SCALE = 1e-6
"""The smallest ``time_scale``: a million times faster than real time. The engine's clock is the
wall clock divided by it; much smaller, and a step's few milliseconds round away against it (at
1e-300 every step took no time), or it overflows to infinity (at 1e-320 within a second, and the
server took requests and never answered them, until review R60)."""

MAX_LAG_S = 0.05
"""Most wall-clock seconds the runner may fall behind its engine's schedule and still catch up."""

Fault = Literal["none", "hang", "garbage", "error", "metrics_down"]
FAULTS: tuple[Fault, ...] = get_args(Fault)
"""The faults ``SimServer.fault`` takes; any other name is refused (until review R83 a misspelled
one was kept and silently ignored: the server answered as if healthy)."""

TRACE_HEADERS = ("traceparent", "tracestate", "baggage")
"""The trace context headers ``SimServer.trace_headers`` records (W3C Trace Context and Baggage)."""
TRACE_HEADERS_KEPT = 1024
"""How many chat requests' trace headers ``SimServer.trace_headers`` keeps (the latest)."""
AUTHORIZATIONS_KEPT = 1024
"""How many distinct (path, ``Authorization``) pairs ``SimServer.authorizations`` counts one by
one; the requests of any pair after those are counted together under (path, ``OTHERS``)."""
OTHERS = "(others)"
KEPT_HEADER_CHARS = 8192
"""Most characters of one header value ``trace_headers`` and ``authorizations`` keep: W3C
Baggage's limit (8,192 bytes), the longest of the trace headers, and far above any API key. A
longer value is kept as its first ``KEPT_HEADER_CHARS`` characters and ``...(N characters)``
(``_kept``): until review R66 each was kept whole, up to a 4 MiB head, and 1,024 of them held
some 4 GiB."""


@dataclass(slots=True)
class _Live:
    sim: SimRequest
    queue: asyncio.Queue[int | None]


class _Runner:
    """Drives the engine in scaled wall-clock time and hands tokens to the waiting handlers."""

    def __init__(self, engine: Engine, time_scale: float, scrape_lag_s: float) -> None:
        self.engine = engine
        self.time_scale = time_scale
        self.scrape_lag_s = scrape_lag_s
        self.live: dict[str, _Live] = {}
        self.wake = asyncio.Event()
        self.wall0 = time.monotonic()
        self.sim_now = 0.0
        self.snapshot = engine.metrics()
        self.snapshot_at = 0.0
        self.last_arrival = 0.0
        """Simulated time of the latest request added: no step that could admit it starts earlier."""

    def clock(self) -> float:
        return (time.monotonic() - self.wall0) / self.time_scale

    def submit(self, sim: SimRequest) -> asyncio.Queue[int | None]:
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        self.live[sim.id] = _Live(sim, queue)
        sim.arrival = self.clock()
        self.engine.add(sim)
        self.last_arrival = sim.arrival
        self.wake.set()
        return queue

    def cancel(self, request_id: str) -> None:
        if self.live.pop(request_id, None) is not None:
            self.engine.abort(request_id)

    def refresh_snapshot(self) -> None:
        now = self.clock()
        if now - self.snapshot_at >= self.scrape_lag_s:
            self.snapshot = self.engine.metrics()
            self.snapshot_at = now

    async def run(self) -> None:
        busy = False
        while True:
            self.refresh_snapshot()
            if not self.engine.has_work():
                busy = False
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self.wake.wait(), timeout=max(0.01, self.scrape_lag_s * self.time_scale)
                    )
                continue
            # While the engine stays busy, a step starts where the previous one ended, not when
            # the runner got round to it: the runner's own work between steps (waking up, handing
            # the tokens over, on a loaded machine waiting for a core) would otherwise lengthen
            # every step, and a lone decode's inter-token latency was 1.4x-2x the model's. The
            # runner catches up by sleeping less; it restarts from the clock after an idle spell,
            # when it lags by more than MAX_LAG_S of wall time (a stalled process does not get a
            # burst of instant steps), and never starts a step before the latest request arrived.
            now = self.clock()
            lagging = now - self.sim_now > MAX_LAG_S / self.time_scale
            start = max(now if not busy or lagging else self.sim_now, self.last_arrival)
            busy = True
            result = self.engine.step(start)
            self.sim_now = start + result.duration
            delay = self.wall0 + self.sim_now * self.time_scale - time.monotonic()
            await asyncio.sleep(max(0.0, delay))
            for sim in (*result.first_token, *result.decoded):
                live = self.live.get(sim.id)
                if live is not None:
                    live.queue.put_nowait(sim.generated)
            for sim in result.finished:
                live = self.live.pop(sim.id, None)
                if live is not None:
                    live.queue.put_nowait(None)


_ENGINE_METRICS: tuple[tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str], ...] = (
    (GaugeMetricFamily, "vllm:num_requests_running", "Number of requests in model execution batches."),
    (GaugeMetricFamily, "vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    (GaugeMetricFamily, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
    (
        CounterMetricFamily,
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    (
        CounterMetricFamily,
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
    ),
    (CounterMetricFamily, "vllm:num_preemptions", "Cumulative number of preemption from the engine."),
)
"""The engine figures ``/metrics`` serves, as vLLM names and documents them: kind, name, help."""


class _Metrics(Collector):
    def __init__(self, server: SimServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        runner = self.server._runner
        snap = runner.snapshot if runner is not None else {}
        labels = ["model_name", "engine"]
        values = [self.server.model_name, "0"]
        for family, name, doc in _ENGINE_METRICS:
            metric = family(name, doc, labels=labels)
            metric.add_metric(values, snap.get(name, 0.0))
            yield metric
        engine = self.server.engine
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "num_gpu_blocks", "enable_prefix_caching"],
        )
        blocks = engine.kv.capacity // engine.config.block_tokens
        info.add_metric([str(engine.config.block_tokens), str(blocks), "True"], 1.0)
        yield info


def _sent_as_utf8(text: str, name: str, what: str, *, secret: bool = False) -> None:
    """Refuse ``text`` (the argument ``name``, ``what`` it is) that the server sends or compares as
    UTF-8 and UTF-8 cannot encode (a lone surrogate), with ``InputError`` naming the character
    and where it is; a ``secret`` is not quoted."""
    if text.isascii() or _unicode(text):
        return
    at = next(i for i, c in enumerate(text) if not _unicode(c))
    given = "" if secret else f", not {quoted(text)}"
    raise InputError(
        f"{name} must be text UTF-8 can encode ({what}){given}: "
        f"it holds {character_named(text[at])} at character {at + 1}"
    )


def _check_api_key(api_key: object) -> None:
    """Refuse an ``api_key`` that is neither ``None`` nor non-empty printable ASCII without
    whitespace, what an ``Authorization`` header carries (``InputError``; the key itself is never
    quoted). The inventory refuses a backend's key of other characters in the same words."""
    if api_key is None:
        return
    if not isinstance(api_key, str):
        raise InputError(f"api_key must be text (None: no key asked for), not {shown(api_key)}")
    if not api_key:
        raise InputError("api_key must not be empty (None: no key asked for)")
    # Until a regression review (round c) of R87 a lone surrogate was taken, and every /v1
    # request, whose key is compared as UTF-8, was a 500 with a UnicodeEncodeError.
    _sent_as_utf8(api_key, "api_key", "the key /v1 asks for as a Bearer token", secret=True)
    # Until review R90 any other text was taken, and no client could present it: a line break
    # (a key read from a file) cannot be sent in a header, a trailing space is read off by HTTP
    # parsers, and a non-ASCII key sent as UTF-8 is read back as Latin-1: every /v1 request a 401.
    at = next((i for i, c in enumerate(api_key) if not " " < c < "\x7f"), None)
    if at is not None:
        held = "a space (U+0020)" if api_key[at] == " " else character_named(api_key[at])
        raise InputError(
            "api_key must be printable ASCII without whitespace, which an Authorization header can "
            f"carry: it holds {held} at character {at + 1}"
        )


class SimServer:
    """A simulated vLLM backend served over HTTP on 127.0.0.1 from a background thread.

    Use as a context manager, or call ``start()`` / ``stop()``. ``url`` is the base URL.
    Raises ``InputError`` for a ``model`` that is not a ``LatencyModel`` (a profile's name
    among them) or a ``config`` neither an ``EngineConfig`` nor ``None`` (a dict of settings among
    them: ``check_engine_arguments``), a ``model_name`` that is not non-empty text UTF-8 can
    encode (a lone surrogate is none), a
    ``time_scale`` that is not a finite number of at least
    ``MIN_TIME_SCALE`` (1e-6), a ``scrape_lag_s`` that is not a finite number of 0 or more, a
    ``max_model_len`` that is not an integer of at least 2, an ``api_key`` that is neither ``None``
    nor non-empty printable ASCII without whitespace (not quoted; what a header carries), a ``body_timeout_s``
    that is not a positive finite number (an integer too large for a float is none: until review
    R84 ``10**400`` was taken, and failed the first sum with a float), or HTTP limits (``head_timeout_s``, ``max_head_bytes``,
    ``stall_s``, ``unread_body_s``) that ``HttpLimits`` refuses (``agentgate/_http_limits.py``).
    """

    def __init__(
        self,
        model: LatencyModel = LLAMA_8B_H100,
        config: EngineConfig | None = None,
        *,
        model_name: str = "llama-3.1-8b",
        time_scale: float = 1.0,
        scrape_lag_s: float = 0.5,
        port: int = 0,
        max_model_len: int = DEFAULT_MAX_MODEL_LEN,
        api_key: str | None = None,
        body_timeout_s: float = BODY_TIMEOUT_S,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        max_head_bytes: int = MAX_HEAD_BYTES,
        stall_s: float | None = STALL_S,
        unread_body_s: float = UNREAD_BODY_S,
    ) -> None:
        # Each type is checked before its range: until review R66 text raised a bare TypeError
        # from the comparison, and max_model_len=2.5 was taken.
        check_engine_arguments(model, config)
        if not isinstance(model_name, str) or not model_name:
            # Until review R87 None was taken, and /v1/models served the model as "id": null.
            given = "empty text" if isinstance(model_name, str) else shown(model_name)
            raise InputError(f"model_name must be non-empty text (the served model's id), not {given}")
        # Until review R87b a lone surrogate was taken, and every /v1/models and /metrics
        # request, which send the name as UTF-8, was a 500 with a UnicodeEncodeError.
        _sent_as_utf8(model_name, "model_name", "the served model's id")
        if not (finite(time_scale) and time_scale >= MIN_TIME_SCALE):
            raise InputError(
                f"time_scale must be a finite number of at least {MIN_TIME_SCALE:g} (1.0 is real time, "
                f"{MIN_TIME_SCALE:g} a million times faster), not {time_scale!r:.40}"
            )
        if not (finite(scrape_lag_s) and scrape_lag_s >= 0):
            raise InputError(f"scrape_lag_s must be a number of seconds, 0 or more, not {scrape_lag_s!r:.40}")
        if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 2:
            raise InputError(
                "max_model_len must be an integer of at least 2 tokens (a prompt and an answer), "
                f"not {max_model_len!r:.40}"
            )
        self.model = model
        self.config = config or EngineConfig()
        self.model_name = model_name
        self.time_scale = time_scale
        self.scrape_lag_s = scrape_lag_s
        self._fault: Fault = "none"
        self.engine = Engine(model, self.config)
        self.max_model_len = min(max_model_len, self.engine.kv.capacity)
        """Most tokens (prompt + ``max_tokens``) one request may ask for; never above the KV
        capacity, so that every admitted request can run to completion alone."""
        _check_api_key(api_key)
        if not (finite(body_timeout_s) and body_timeout_s > 0):
            raise InputError(
                f"body_timeout_s must be a positive number of seconds, not {body_timeout_s!r:.40}"
            )
        self.http_limits = HttpLimits(
            max_head_bytes=max_head_bytes,
            head_timeout_s=head_timeout_s,
            stall_s=stall_s,
            unread_body_s=unread_body_s,
        )
        """The bounds of each connection (the protocol's: ``agentgate/_bounded_http.py``)."""
        self.body_timeout_s = body_timeout_s
        """Most wall-clock seconds a chat body may take to arrive in full (not scaled by
        ``time_scale``: the client's clock is the wall clock); a slower one is answered 408."""
        self.head_timeout_s = self.http_limits.head_timeout_s
        """Most wall-clock seconds a request head may take to arrive, from the connection's opening
        or the head's first byte; a slower one is answered 408 and its connection closed."""
        self._api_key = api_key
        self.authorizations: collections.Counter[tuple[str, str | None]] = collections.Counter()
        """How many ``/v1/*`` requests each (path, ``Authorization`` value) had (several headers
        joined by ``", "``; ``None``: no header)."""
        self.trace_headers: collections.deque[dict[str, str]] = collections.deque(maxlen=TRACE_HEADERS_KEPT)
        """For each of the latest ``TRACE_HEADERS_KEPT`` ``POST /v1/chat/completions`` requests, in
        order of arrival, the ``TRACE_HEADERS`` it carried, by lower-case name (several of a name
        joined by ``","``); an empty dict for a request that carried none."""
        self.port = port_number(port) or _free_port()
        self._may_choose_port = port == 0
        """Whether ``start`` may choose another port if this one was taken meanwhile: the server
        chose it itself and has never served on it."""
        self._runner: _Runner | None = None
        self._server: _StoppableServer | None = None
        self._thread: threading.Thread | None = None
        self._ids = itertools.count()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Metrics(self))
        self.served = 0

    @property
    def fault(self) -> Fault:
        """The fault the server plays (module docstring); ``"none"``: it serves. Setting a name
        not in ``FAULTS`` raises ``InputError`` naming the known ones, and changes nothing."""
        return self._fault

    @fault.setter
    def fault(self, fault: Fault) -> None:
        if fault not in FAULTS:
            raise InputError(f"fault must be one of {', '.join(map(repr, FAULTS))}, not {fault!r:.40}")
        self._fault = fault

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> SimServer:
        """Serve in a background thread; returns once the port accepts connections (at once if
        serving already).

        Raises ``DispatchError`` naming the port if it is in use (or cannot be bound), or if the
        server does not start within ``timeout`` seconds; nothing is left running, and a later
        ``start`` tries again. A port the server chose itself (``port=0``) that was taken before
        its first ``start`` is chosen again (``port`` and ``url`` change); a port named, or one
        served on before (``revive``), is kept.
        """
        if self._thread is not None:
            return self
        try:
            listener = _listen(self.port)
        except DispatchError:
            # A port this server chose when made (bound and closed) that another process took
            # before ``start``: choose again (until review R66, "Address already in use" for a
            # port the caller never named). A port named, or served on once, stays.
            if not self._may_choose_port:
                raise
            self.port = _free_port()
            listener = _listen(self.port)
        self._may_choose_port = False
        # Imported here: httptools and uvicorn's protocol are needed only once serving.
        from agentgate._bounded_http import BoundedHttpToolsProtocol, EmbeddedConfig

        app = _QuietWhenCut(self._app())
        # The process's logging is left as it is (until review R63 uvicorn.error was set to CRITICAL).
        config = EmbeddedConfig(
            app,
            host="127.0.0.1",
            port=self.port,
            lifespan="on",
            access_log=False,
            ws="none",  # no WebSockets served: no websockets import (a DeprecationWarning in old uvicorn)
            http=BoundedHttpToolsProtocol.with_limits(self.http_limits),
        )
        self._server = _StoppableServer(config, app)
        self._thread = threading.Thread(
            target=self._server.run, args=([listener],), name=f"sim-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                listener.close()
                raise DispatchError(
                    f"the simulated backend on 127.0.0.1:{self.port} did not start within {timeout:g} s"
                )
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and join the thread; in-flight requests are cut off."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._server.force_exit = True
        self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def kill(self) -> None:
        """Simulate a crash: close the port and drop the engine's state."""
        self.stop()
        self.engine = Engine(self.model, self.config)

    def revive(self) -> None:
        """Serve again on the same port after ``kill``."""
        self.start()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP ----------------------------------------------------------------------------

    def _app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self._runner = _Runner(self.engine, self.time_scale, self.scrape_lag_s)
            task = asyncio.create_task(self._runner.run())
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
            ],
            lifespan=lifespan,
            exception_handlers={HTTPException: _http_exception},
        )

    async def _health(self, request: Request) -> Response:
        if self.fault in ("hang", "error"):
            return await self._fault_response()
        return PlainTextResponse("ok")

    @property
    def api_key(self) -> str | None:
        """The key ``/v1/*`` asks for as ``Authorization: Bearer``; ``None``: none. May be changed
        while serving (a key rotated on the backend); a key that is not ``None`` or non-empty
        printable ASCII without whitespace is refused with ``InputError``, the key kept."""
        return self._api_key

    @api_key.setter
    def api_key(self, api_key: str | None) -> None:
        _check_api_key(api_key)
        self._api_key = api_key

    def _refused(self, request: Request) -> Response | None:
        """Count the request's ``Authorization``; a 401 if ``api_key`` is set and not presented."""
        sent = request.headers.getlist("authorization")
        key = (request.url.path, _kept(", ".join(sent)) if sent else None)
        if key not in self.authorizations and len(self.authorizations) >= AUTHORIZATIONS_KEPT:
            key = (request.url.path, OTHERS)  # each caller's own header would grow it without end
        self.authorizations[key] += 1
        if self.api_key is None:
            return None
        expected = f"Bearer {self.api_key}".encode()
        if len(sent) == 1 and hmac.compare_digest(sent[0].encode(), expected):
            return None
        return _error(401, "authentication_error", "invalid or missing API key")

    async def _models(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "owned_by": "agentgate-sim"}],
            }
        )

    async def _metrics(self, request: Request) -> Response:
        if self.fault in ("metrics_down", "hang", "error"):
            return PlainTextResponse("metrics unavailable", status_code=503)
        return Response(generate_latest(self._registry), media_type="text/plain; version=0.0.4")

    async def _fault_response(self) -> Response:
        if self.fault == "hang":
            await asyncio.sleep(3600)
        if self.fault == "garbage":
            return Response(b"\x00\xffnot json{{", media_type="application/json")
        return JSONResponse(
            {"error": {"message": "simulated failure", "type": "server_error"}}, status_code=500
        )

    async def _chat(self, request: Request) -> Response:
        headers = request.headers
        self.trace_headers.append(
            {name: _kept(",".join(headers.getlist(name))) for name in TRACE_HEADERS if name in headers}
        )
        if (refused := self._refused(request)) is not None:
            return refused
        if self.fault in ("hang", "garbage", "error"):
            return await self._fault_response()
        if (refused := _not_json(headers.get("content-type"))) is not None:
            return refused
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await _read_body(request)
            chat = parse_chat(body, self.max_model_len)
        except _BodyTooLarge as exc:
            # 413, as the gateway and OpenAI's API answer it: the request may be well formed.
            return _error(413, "invalid_request_error", str(exc))
        except InputError as exc:
            return _error(400, "invalid_request_error", str(exc))
        except TimeoutError:
            # As a real server does (nginx's client_body_timeout): 408, and the connection closed,
            # since the rest of the body would be read as the next request.
            response = _error(
                408, "invalid_request_error", f"the body did not arrive within {self.body_timeout_s:g} s"
            )
            response.headers["connection"] = "close"
            return response
        except ClientDisconnect:
            return _error(400, "invalid_request_error", "the client went away")
        if chat.model is not None and chat.model != self.model_name:
            return _error(404, "not_found_error", f"model {quoted(chat.model, 60)} not served")
        runner = self._runner
        assert runner is not None
        rid = f"chatcmpl-sim{self.port}-{next(self._ids)}"
        sim = SimRequest(
            rid,
            chat.prompt_tokens,
            chat.max_tokens,
            _prompt_hashes(chat.text, chat.prompt_tokens, self.config.block_tokens),
        )
        queue = runner.submit(sim)
        self.served += 1
        if chat.stream:
            return StreamingResponse(
                self._stream(runner, sim, queue, chat.include_usage), media_type="text/event-stream"
            )
        # Starlette does not cancel a plain handler whose client hangs up: watch for it, so that a
        # request nobody waits for stops decoding and gives back its KV.
        finished = asyncio.ensure_future(_drain(queue))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait((finished, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not finished.done():
                finished.cancel()
                runner.cancel(rid)
        if not finished.done() or finished.cancelled():
            return Response(status_code=499)
        return JSONResponse(self._completion(sim))

    async def _stream(
        self, runner: _Runner, sim: SimRequest, queue: asyncio.Queue[int | None], include_usage: bool
    ) -> AsyncIterator[bytes]:
        created = int(time.time())
        try:
            sent = 0
            while True:
                n = await queue.get()
                if n is None:
                    break
                for _ in range(n - sent):
                    yield _sse(_chunk(sim.id, created, self.model_name, {"content": f"tok{sent} "}, None))
                    sent += 1
            yield _sse(_chunk(sim.id, created, self.model_name, {}, "length"))
            if include_usage:
                yield _sse(
                    {
                        "id": sim.id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": self.model_name,
                        "choices": [],
                        "usage": _usage(sim),
                    }
                )
            yield b"data: [DONE]\n\n"
        finally:
            runner.cancel(sim.id)

    def _completion(self, sim: SimRequest) -> dict[str, Any]:
        return {
            "id": sim.id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": " ".join(f"tok{i}" for i in range(sim.generated)),
                    },
                    "finish_reason": "length",
                }
            ],
            "usage": _usage(sim),
        }


class _QuietWhenCut:
    """An ASGI app whose requests end quietly once a forced exit cut them (``cut``).

    uvicorn logs any exception a request's task raises, ``CancelledError`` included, as
    "Exception in ASGI application" with its traceback. A request cut by ``SimServer.stop`` (its
    connection reset, then its task cancelled) has no caller left to answer, so its cancellation
    ends it like a request whose caller hung up: nothing to log.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.cut = False
        """Set by the forced exit before it cancels the requests in flight."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if not (self.cut and scope["type"] == "http"):
                raise


class _StoppableServer(uvicorn.Server):
    """uvicorn's server, whose forced exit (``SimServer.stop``) cuts the requests in flight and
    still shuts the app's lifespan down, logging nothing.

    uvicorn's forced exit leaves both to the event loop's end, which cancels the lifespan task
    (Starlette then reports the ``CancelledError`` as a failed shutdown, which uvicorn logs as a
    traceback) and each request's task (logged "Exception in ASGI application"): until review R62
    every simulator stopped logged one traceback for its lifespan and one for each request in
    flight. Here each connection is reset instead (its caller sees it closed, as from a crashed
    server), each request's task is cancelled (``app`` ends it quietly) and waited for, then the
    lifespan shutdown runs. Until review R63 the requests were only waited for, up to 5 s: a
    handler that watches no disconnect (the ``hang`` fault sleeps an hour) held every stop 5 s.
    """

    def __init__(self, config: uvicorn.Config, app: _QuietWhenCut) -> None:
        super().__init__(config)
        self.app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.force_exit:
            for connection in list(self.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()
        await super().shutdown(sockets)
        if not self.force_exit:
            return
        if tasks := [task for task in self.server_state.tasks if not task.done()]:
            self.app.cut = True
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        await self.lifespan.shutdown()


class _BodyTooLarge(InputError):
    """A chat body over ``MAX_BODY_BYTES`` (answered 413)."""


async def _read_body(request: Request) -> bytes:
    """The request's body; ``_BodyTooLarge`` as soon as it passes ``MAX_BODY_BYTES`` (nothing more
    of it is read into memory)."""
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > MAX_BODY_BYTES:
            raise _BodyTooLarge(f"the body is larger than {MAX_BODY_BYTES} bytes")
        body += chunk
    return bytes(body)


def _not_json(content_type: str | None) -> JSONResponse | None:
    """A 400 for a chat body declared as anything but JSON; ``None`` for JSON or no declaration.

    As vLLM (FastAPI) reads a body: with no (or an empty) ``Content-Type`` as JSON, with ``application/json`` or
    ``application/*+json`` (any parameters) as JSON, and with any other type (``text/plain``, a
    form) not at all, which fails its validation with a 400. Until review R60 the simulator
    parsed and served such a body, where the backend it stands for refuses it."""
    if not content_type:
        return None
    media = content_type.partition(";")[0].strip().lower()
    kind, _, subtype = media.partition("/")
    if kind == "application" and (subtype == "json" or subtype.endswith("+json")):
        return None
    return _error(
        400,
        "invalid_request_error",
        f"the body must be JSON (Content-Type: application/json), not {content_type[:60]!r}",
    )


def _prompt_hashes(text: str, prompt_tokens: int, block_tokens: int) -> tuple[int, ...]:
    """The block hashes of a prompt the engine can read: those of its first ``prompt_tokens //
    block_tokens`` blocks, the leading ones of ``block_hashes(text)``. For a text prompt they
    are the router's (``prompt_block_hashes``); a media part's data URL is hashed here as its
    text, where the router hashes a digest of the part, so two images sharing their first bytes
    share blocks here that the router predicts are not shared (review R94).

    A media part counts as a fixed number of tokens but its text (a data URL) may be megabytes:
    until review R93 all of it was hashed, on the event loop, a 15 MiB image 245,761 hashes (half
    a second, and 10 MB kept per request in flight) of which the engine read 90.
    """
    return block_hashes(text[: prompt_tokens // block_tokens * block_tokens * CHARS_PER_TOKEN], block_tokens)


async def _drain(queue: asyncio.Queue[int | None]) -> None:
    """Return once the runner marks the request finished (``None`` on its queue)."""
    while await queue.get() is not None:
        pass


async def _disconnected(request: Request) -> None:
    """Return once the client of ``request`` (whose body was read) hangs up."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _kept(value: str) -> str:
    """``value`` as ``trace_headers`` and ``authorizations`` keep it: whole up to
    ``KEPT_HEADER_CHARS`` characters, else its first ones and its length."""
    if len(value) <= KEPT_HEADER_CHARS:
        return value
    return f"{value[:KEPT_HEADER_CHARS]}...({len(value)} characters)"


async def _http_exception(request: Request, exc: Exception) -> Response:
    """An OpenAI error body for an ``HTTPException`` (a path not served, 404; a method an endpoint
    does not take, 405), as vLLM's ``http_exception_handler`` answers it: the detail as its
    message, the status's phrase as its type, the exception's headers (``Allow``) kept. Until
    review R66 Starlette's default answered ``text/plain``."""
    assert isinstance(exc, HTTPException)
    response = _error(exc.status_code, HTTPStatus(exc.status_code).phrase, exc.detail)
    response.headers.update(exc.headers or {})
    return response


def _error(status: int, kind: str, message: str) -> JSONResponse:
    """An OpenAI-style error body."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status)


def _usage(sim: SimRequest) -> dict[str, Any]:
    return {
        "prompt_tokens": sim.prompt_tokens,
        "completion_tokens": sim.generated,
        "total_tokens": sim.prompt_tokens + sim.generated,
        "prompt_tokens_details": {"cached_tokens": sim.cached_tokens},
    }


def _chunk(rid: str, created: int, model: str, delta: dict[str, str], finish: str | None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _listen(port: int) -> socket.socket:
    """A socket listening on loopback ``port``, for the server to serve on.

    Bound here rather than by uvicorn, whose failure to bind was a line in its log and a thread
    that died (``start`` then raised a bare "did not start" and, until review R63, kept the dead
    thread, so that a later ``start`` served nothing)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(
        socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
    )  # as uvicorn's: revive() binds the port it just closed
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise DispatchError(
            f"the simulated backend cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}"
        ) from None
    return sock


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
