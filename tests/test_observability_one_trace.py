"""One agent run is ONE trace, end to end: the application's span, the
Gate's and the LangGraph middleware's spans, and the inference server the model call went to.

Real OpenTelemetry SDK (in-memory exporter, W3C Trace Context propagator), real Gates on SQLite
files driven by real LangGraph agents, the real ``Dispatcher`` over real HTTP on 127.0.0.1 to
``agentgate.sim`` servers (which record the trace headers each chat request carried, as a vLLM
or SGLang server started with OTLP tracing reads them), and the gateway (``GatewayServer``) over
real HTTP in front of them.

What holds (tested here):
- every span of an agent run (model calls through ``wrap_model_call`` and tool calls, sync and
  async, tools run on LangGraph's thread pool) is in the application's trace, under its span,
  and that span continues the trace of an upstream caller (with its ``tracestate``);
- a model call dispatched through ``Gate.dispatch`` / ``adispatch`` (the dispatcher runs on a loop
  thread of its own) sends ``traceparent`` (and the ``tracestate``) of the call's ``chat`` span to
  the backend: the inference server's span is the child of the model call's span, each model
  call its own; every attempt of a call that fails over carries the same context; a direct
  ``Dispatcher.chat`` / ``stream`` sends the caller's current span; a sampled-out span is sent
  as not sampled; no span at all sends no header; no ``baggage`` (application data) and no
  prompt text ever reaches a backend's headers or a span;
- the gateway's ``chat`` span links the ``traceparent`` (and ``tracestate``) its caller sent,
  in a trace of its own (since review R94: the caller's sampled flag is not the gateway's to
  follow, tests/test_observability_r94_caller_sampling.py);
- the gateway answers calls carrying hostile ``traceparent`` / ``tracestate`` headers (garbage,
  all-zero ids, version ``ff``, upper-case hex, 16 KiB values, non-ASCII) as any other: no
  error, no span parented on or linked to them, nothing of them forwarded upstream.

Fixed in this round (agentgate/dispatch/backends.py, dispatcher.py; docs/dispatch.md "Tracing"):
no model call carried any trace context to its backend, and ``Gate.dispatch`` lost the caller's
context on the dispatcher's loop thread.

Fixed by the lead from this review's patch (were strict xfails):
- the gateway ignored the ``traceparent`` its caller sent: its ``chat`` span started a new trace
  (agentgate/dispatch/gateway/_app.py; since review R94 a new trace again, linked to the caller's);
- the gateway's lean upstream pool sent no trace headers, so a plain-http backend behind the
  gateway never joined the gateway's trace (agentgate/dispatch/gateway/_upstream.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
import test_observability
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Sampler
from opentelemetry.trace import Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from test_gateway import MODEL, NAMES, _policy_text
from test_observability import Sweep, _calls

from agentgate.audit.spans import get_tracer
from agentgate.capabilities import Call
from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.errors import BackendFailed
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

sweep = test_observability.sweep  # the fixture, shared

SCRIPTED = "scripted"  # the sweep policy's model
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
UPSTREAM = {"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "upstream=abc,other=1"}
CANARY = "PROMPT-CANARY-40417"
SECRET = "BAGGAGE-SECRET-5521"


@pytest.fixture(scope="module")
def sims() -> Iterator[list[SimServer]]:
    servers = [SimServer(model_name=SCRIPTED, time_scale=0.001).start() for _ in range(2)]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def sim(sims: list[SimServer]) -> list[SimServer]:
    for server in sims:
        server.trace_headers.clear()
        server.fault = "none"
    return sims


def _inventory(servers: list[SimServer], model: str = SCRIPTED) -> Any:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"sim-{i}", "url": s.url, "engine": "vllm", "models": [model]}
                for i, s in enumerate(servers)
            ]
        }
    )


@dataclass(frozen=True)
class Parent:
    """A ``traceparent`` header, parsed."""

    trace_id: str
    span_id: str
    flags: str


def _traceparent(headers: dict[str, str]) -> Parent:
    assert "traceparent" in headers, headers
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert version == "00" and len(trace_id) == 32 and len(span_id) == 16, headers
    return Parent(trace_id, span_id, flags)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    names: list[str] = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


def _upstream_context() -> otel_context.Context:
    """The context an upstream service's call hands the application (W3C headers, extracted)."""
    return TraceContextTextMapPropagator().extract(UPSTREAM)


# --- (1) + (2) one agent run, one trace, down to the inference server ---------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_agent_run_is_one_trace_down_to_the_inference_server(
    sweep: Sweep, sim: list[SimServer], mode: str
) -> None:
    """An application span (continuing an upstream caller's trace) around ``agent.invoke``: every
    span of the run is in that trace and under that span, and each model call the dispatcher sent
    (on its own loop thread) reached the backend with the ``traceparent`` of its own ``chat`` span
    and the upstream ``tracestate``. No header reached the backend at all: the inference server's
    spans started traces of their own, and a trace ended at the gateway's door."""
    gate = sweep.gate
    gate.attach_dispatcher(Dispatcher(_inventory(sim[:1]), Router(_inventory(sim[:1]))))
    model = ScriptedChatModel(
        turns=[_calls(("lookup", {"id": "1"}), ("lookup", {"id": "2"})), AIMessage(content="done")],
        served_by=gate,
    )
    agent = create_gated_agent(gate, name="boss", model=model, tools=sweep.tools())
    start = {"messages": [{"role": "user", "content": "go"}]}
    sweep.exporter.clear()  # the span of the boss's grant, issued by the fixture: a trace of its own
    with gate.tracer.start_as_current_span("app", context=_upstream_context()) as app:
        if mode == "sync":
            result = agent.invoke(start, context=sweep.boss)
        else:
            result = asyncio.run(agent.ainvoke(start, context=sweep.boss))
    assert [m.status for m in result["messages"] if isinstance(m, ToolMessage)] == ["success"] * 2
    gate.flush()  # a call's span ends once its outcome is written (review R69)
    spans = list(sweep.exporter.get_finished_spans())
    assert {_hex(s.context.trace_id, 32) for s in spans if s.context is not None} == {TRACE}
    assert app.parent is not None and _hex(app.parent.span_id, 16) == PARENT
    for span in spans:
        if span.name != "app":
            assert "app" in _ancestors(span, spans), (span.name, _ancestors(span, spans))
    chats = {_hex(s.context.span_id, 16): s for s in spans if s.name == f"chat {SCRIPTED}" and s.context}
    tools = [s for s in spans if s.name == "execute_tool lookup"]
    assert len(chats) == 2 and len(tools) == 2
    received = list(sim[0].trace_headers)
    assert len(received) == 2, received
    parents = [_traceparent(h) for h in received]
    assert {p.trace_id for p in parents} == {TRACE}
    assert {p.flags for p in parents} == {"01"}
    assert {p.span_id for p in parents} == set(chats)  # each call's own span, not the app's
    assert {h.get("tracestate") for h in received} == {UPSTREAM["tracestate"]}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_refused_tool_call_and_an_approval_request_are_in_the_runs_trace(sweep: Sweep, mode: str) -> None:
    """The spans the middleware makes for calls that do not run (decided on a worker thread under
    ``ainvoke``): a refusal and an approval request are under the application's span too."""
    tools = sweep.tools()
    model = ScriptedChatModel(
        turns=[_calls(("transfer", {"to": "bob"}), ("vault", {"pin": "99"})), AIMessage(content="done")]
    )
    agent = create_gated_agent(
        sweep.gate, name="boss", model=model, tools=tools, checkpointer=InMemorySaver()
    )
    start = {"messages": [{"role": "user", "content": "go"}]}
    config = {"configurable": {"thread_id": f"refused-{mode}"}}
    sweep.exporter.clear()  # the span of the boss's grant, issued by the fixture: a trace of its own
    with sweep.gate.tracer.start_as_current_span("app", context=_upstream_context()):
        if mode == "sync":
            agent.invoke(start, config, context=sweep.boss)
        else:
            asyncio.run(agent.ainvoke(start, config, context=sweep.boss))
    spans = list(sweep.exporter.get_finished_spans())
    decisions = {
        s.name: (s.attributes or {}).get("agentgate.decision")
        for s in spans
        if s.name.startswith("execute_tool")
    }
    assert decisions == {"execute_tool transfer": "approval_required", "execute_tool vault": "deny"}, (
        decisions
    )
    for span in spans:
        assert span.context is not None and _hex(span.context.trace_id, 32) == TRACE, span.name
        if span.name != "app":
            assert "app" in _ancestors(span, spans), span.name


def test_only_trace_context_and_no_prompt_reaches_the_backend_or_the_spans(
    sweep: Sweep, sim: list[SimServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application's baggage (application data, here a secret) is not a backend's business:
    the backend gets ``traceparent`` (and ``tracestate``), never ``baggage``, whatever the global
    propagators are. The prompt is in no span, with content capture on (it covers tool arguments
    and results, which the caller passes; a chat span records no messages)."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    gate = sweep.gate
    gate.attach_dispatcher(Dispatcher(_inventory(sim[:1]), Router(_inventory(sim[:1]))))
    auth = gate.authorize(sweep.boss, Call.model(SCRIPTED, {"max_tokens": 8}), tokens=(20, 8))
    payload = {"model": SCRIPTED, "messages": [{"role": "user", "content": f"hi {CANARY}"}], "max_tokens": 8}
    token = otel_context.attach(baggage.set_baggage("user.secret", SECRET))
    try:
        with gate.tracer.start_as_current_span("app"):
            answer = gate.run(auth, lambda: gate.dispatch(payload))
    finally:
        otel_context.detach(token)
    assert answer.usage.completion_tokens == 8
    (received,) = sim[0].trace_headers
    assert set(received) == {"traceparent"}, received  # no tracestate was set, no baggage is sent
    exported = "\n".join(s.to_json() for s in sweep.exporter.get_finished_spans())
    assert CANARY not in exported and SECRET not in exported


def test_a_dispatch_outside_a_gated_call_carries_the_callers_span(sweep: Sweep, sim: list[SimServer]) -> None:
    """``Gate.dispatch`` / ``adispatch`` called by the application itself (no gated ``chat`` span
    around it): the backend's span is a child of the application's current span."""
    gate = sweep.gate
    gate.attach_dispatcher(Dispatcher(_inventory(sim[:1]), Router(_inventory(sim[:1]))))
    payload = {"model": SCRIPTED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with gate.tracer.start_as_current_span("sync-caller") as sync_caller:
        gate.dispatch(payload)

    async def from_a_loop() -> None:
        with gate.tracer.start_as_current_span("async-caller") as caller:
            spans.append(caller)
            await gate.adispatch(payload)

    spans: list[Any] = []
    asyncio.run(from_a_loop())
    got = [_traceparent(h) for h in sim[0].trace_headers]
    expected = [sync_caller.get_span_context(), spans[0].get_span_context()]
    assert [(p.trace_id, p.span_id) for p in got] == [
        (_hex(c.trace_id, 32), _hex(c.span_id, 16)) for c in expected
    ]


@pytest.fixture
def tracer() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield get_tracer(provider), exporter
    provider.shutdown()


def test_the_dispatchers_chat_and_stream_send_the_current_span_and_no_span_sends_nothing(
    sim: list[SimServer], tracer: tuple[Tracer, InMemorySpanExporter]
) -> None:
    """The dispatcher used directly, on the application's own loop: a JSON call and a stream each
    carry the span current when they were made; a call made outside any span carries no trace
    header at all (none is invented), and neither does one whose context holds an invalid span."""
    spans, _ = tracer
    inventory = _inventory(sim[:1])
    payload = {"model": SCRIPTED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}

    async def calls() -> list[Any]:
        made: list[Any] = []
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            with spans.start_as_current_span("json") as json_span:
                made.append(json_span)
                await dispatcher.chat(payload)
            with spans.start_as_current_span("stream") as stream_span:
                made.append(stream_span)
                assert [c async for c in dispatcher.stream(payload)]
            await dispatcher.chat(payload)  # no span
            [_ async for _ in dispatcher.stream(payload)]  # no span
        return made

    made = asyncio.run(calls())
    received = list(sim[0].trace_headers)
    assert len(received) == 4
    assert [_traceparent(h).span_id for h in received[:2]] == [
        _hex(s.get_span_context().span_id, 16) for s in made
    ]
    assert received[2:] == [{}, {}]


def test_a_sampled_out_span_is_propagated_as_not_sampled(sim: list[SimServer]) -> None:
    """A span the application's sampler dropped still has a valid context: the backend is told
    the sampled flag is off (do not record), so it does not start a sampled trace of its own either."""
    provider = TracerProvider(sampler=ALWAYS_OFF)
    inventory = _inventory(sim[:1])
    payload = {"model": SCRIPTED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    async def call() -> Any:
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            with get_tracer(provider).start_as_current_span("dropped") as span:
                await dispatcher.chat(payload)
                return span.get_span_context()

    context = asyncio.run(call())
    (received,) = sim[0].trace_headers
    parent = _traceparent(received)
    assert (parent.trace_id, parent.span_id) == (_hex(context.trace_id, 32), _hex(context.span_id, 16))
    assert int(parent.flags, 16) & 1 == 0, parent  # not sampled (bit 1, "random trace id", may be set)


def test_every_attempt_of_a_call_that_fails_over_carries_the_same_context(
    sim: list[SimServer], tracer: tuple[Tracer, InMemorySpanExporter]
) -> None:
    """Both backends answer garbage (their health probes pass): the call is tried on each, and both
    attempts carry the call's own span, so the failed attempt shows in the same trace."""
    spans, _ = tracer
    for server in sim:
        server.fault = "garbage"
    inventory = _inventory(sim)
    payload = {"model": SCRIPTED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    async def call() -> Any:
        async with Dispatcher(inventory, Router(inventory), max_attempts=2, recovery_wait_s=0) as dispatcher:
            with spans.start_as_current_span("call") as span:
                with pytest.raises(BackendFailed):
                    await dispatcher.chat(payload)
                return span.get_span_context()

    context = asyncio.run(call())
    sent = [h for server in sim for h in server.trace_headers]
    assert len(sent) == 2
    assert {(p.trace_id, p.span_id) for p in map(_traceparent, sent)} == {
        (_hex(context.trace_id, 32), _hex(context.span_id, 16))
    }


# --- (3) + (4) the gateway --------------------------------------------------------------------


@dataclass
class GatewayEnv:
    gate: GatewayGate
    server: GatewayServer
    agent: Any
    exporter: InMemorySpanExporter
    backend: SimServer

    def post(self, body: dict[str, Any], extra: list[tuple[str, bytes]] | None = None) -> httpx.Response:
        headers: list[tuple[str, str | bytes]] = [
            ("content-type", "application/json"),
            *invocation_headers(self.agent.key, self.agent.chain, body).items(),
            *(extra or []),
        ]
        return _http.post(
            f"{self.server.url}/chat/completions",
            content=json.dumps(body).encode(),
            headers=headers,
            timeout=20,
        )

    def chat_span(self) -> ReadableSpan:
        self.gate.flush()  # a call's span ends once its outcome is written (review R69)
        (span,) = [s for s in self.exporter.get_finished_spans() if s.name == f"chat {MODEL}"]
        return span


@pytest.fixture(scope="module")
def model_backend() -> Iterator[SimServer]:
    server = SimServer(model_name=MODEL, time_scale=0.001).start()
    yield server
    server.stop()


@contextmanager
def traced_gateway(
    tmp_path: Path, backend: SimServer, sampler: Sampler | None = None
) -> Iterator[GatewayEnv]:
    """A gateway in front of ``backend`` whose spans its own tracer provider (``sampler``, else
    the SDK's default) exports to memory, with a ``chat`` grant issued to its ``agent``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=get_tracer(provider))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        yield GatewayEnv(gate, server, agent, exporter, backend)
    finally:
        server.stop()
        gate.close()
        provider.shutdown()


@pytest.fixture
def gateway(tmp_path: Path, model_backend: SimServer) -> Iterator[GatewayEnv]:
    model_backend.trace_headers.clear()
    with traced_gateway(tmp_path, model_backend) as env:
        yield env


def _body(stream: bool = False) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": stream,
    }


@pytest.mark.parametrize("kind", ["json", "stream", "refused"])
def test_the_gateway_links_the_trace_its_caller_sent(gateway: GatewayEnv, kind: str) -> None:
    """docs/gateway.md: a client of the gateway (an agent in another language, a service) sends
    W3C ``traceparent``: the gateway's ``chat`` span must link its span (trace id, span id,
    ``tracestate``), for an answered call and a refused one (``max_tokens`` over the grant's 512:
    403) alike. The span is a root of the gateway's own trace, never the caller's child: the
    header is unauthenticated, and its sampled flag must not decide whether the call has a span
    (review R94; tests/test_observability_r94_caller_sampling.py)."""
    body = {**_body(kind == "stream"), "max_tokens": 1000 if kind == "refused" else 4}
    answer = gateway.post(body, [(k, v.encode()) for k, v in UPSTREAM.items()])
    assert answer.status_code == (403 if kind == "refused" else 200), answer.text
    span = gateway.chat_span()
    assert (span.attributes or {}).get("agentgate.decision") == ("deny" if kind == "refused" else "allow")
    assert span.parent is None and span.context is not None and _hex(span.context.trace_id, 32) != TRACE
    (link,) = span.links
    assert (_hex(link.context.trace_id, 32), _hex(link.context.span_id, 16)) == (TRACE, PARENT)
    assert link.context.trace_state.to_header() == UPSTREAM["tracestate"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_gateway_forwards_its_chat_span_to_the_backend(gateway: GatewayEnv, stream: bool) -> None:
    """The backend behind the gateway (vLLM with ``--otlp-traces-endpoint``) must get the
    ``traceparent`` of the gateway's ``chat`` span, so its spans join the gateway's trace."""
    answer = gateway.post(_body(stream))
    assert answer.status_code == 200, answer.text
    span = gateway.chat_span()
    (received,) = gateway.backend.trace_headers
    assert span.context is not None
    parent = _traceparent(received)
    assert (parent.trace_id, parent.span_id) == (
        _hex(span.context.trace_id, 32),
        _hex(span.context.span_id, 16),
    )
    assert int(parent.flags, 16) & 1 == 1, parent  # sampled


_ZERO_TRACE = "0" * 32
HOSTILE: dict[str, list[tuple[str, str]]] = {
    "garbage": [("traceparent", "not a trace parent; DROP TABLE spans")],
    "all_zero_ids": [("traceparent", f"00-{_ZERO_TRACE}-{'0' * 16}-01")],
    "zero_trace_id": [("traceparent", f"00-{_ZERO_TRACE}-{PARENT}-01")],
    "zero_parent_id": [("traceparent", f"00-{TRACE}-{'0' * 16}-01")],
    "version_ff": [("traceparent", f"ff-{TRACE}-{PARENT}-01")],
    "upper_case": [("traceparent", f"00-{TRACE.upper()}-{PARENT.upper()}-01")],
    "v00_with_extra_field": [("traceparent", f"00-{TRACE}-{PARENT}-01-extra")],
    "huge_traceparent": [("traceparent", f"00-{TRACE}-{PARENT}-01" + "0" * 16_384)],
    "huge_tracestate_alone": [("tracestate", ",".join(f"k{i}=v" for i in range(4000)))],
    "non_ascii": [("traceparent", f"00-{TRACE}-{PARENT}-0\u00e9")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_trace_headers_are_ignored_never_an_error(gateway: GatewayEnv, case: str) -> None:
    """A malformed, huge, all-zero or non-ASCII trace header is not a trace to continue: the call
    is answered as any other (200), its span starts a valid trace of its own, and nothing of the
    header is forwarded to the backend. (Holds today since the gateway reads no trace header; it
    must still hold once it does: the W3C propagator refuses each of these.)"""
    answer = gateway.post(_body(), [(name, value.encode()) for name, value in HOSTILE[case]])
    assert answer.status_code == 200, answer.text
    span = gateway.chat_span()
    assert span.context is not None and span.context.trace_id != 0 and span.context.span_id != 0
    assert span.parent is None, span.parent
    assert not span.links, span.links
    assert _hex(span.context.trace_id, 32) != _ZERO_TRACE
    for received in gateway.backend.trace_headers:
        for _, value in HOSTILE[case]:
            assert value not in received.values()
        assert TRACE not in received.get("traceparent", "")


@pytest.mark.parametrize(
    "tracestate",
    [",".join(f"k{i}=v" for i in range(4000)), "a=b,\tbad member,c=" + "x" * 300, "=" * 9000],
    ids=["4000_members", "invalid_member", "9000_chars"],
)
def test_a_hostile_tracestate_beside_a_valid_traceparent_is_never_forwarded(
    gateway: GatewayEnv, tracestate: str
) -> None:
    """A valid ``traceparent`` with a ``tracestate`` the W3C rules refuse (over 32 members, an
    invalid member, over the length limit): the call is answered as any other, and the caller's
    ``tracestate`` does not reach the backend (the propagator drops it; a gateway that continues
    the caller's trace forwards only what it parsed)."""
    answer = gateway.post(
        _body(), [("traceparent", UPSTREAM["traceparent"].encode()), ("tracestate", tracestate.encode())]
    )
    assert answer.status_code == 200, answer.text
    assert gateway.chat_span().context is not None
    for received in gateway.backend.trace_headers:
        assert "tracestate" not in received, received["tracestate"][:80]
