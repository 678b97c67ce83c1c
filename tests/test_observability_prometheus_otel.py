"""What an SRE wiring agentgate into Prometheus and an OpenTelemetry
collector reads: the span of a refused delegation, the span of a streamed gateway call whose
backend fails, and the label of the scheduler's ``breaker_not_shared`` count. Real OpenTelemetry
SDK (in-memory exporter), a real Gate on SQLite driven by LangGraph, the gateway over real HTTP
on 127.0.0.1 in front of a backend of the test's own, a real scheduler on a SQLite store."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import _http
import pytest
import test_audit_spans
import test_observability
from langchain_core.messages import AIMessage, ToolMessage
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer
from test_gateway import MODEL, NAMES, _policy_text
from test_observability import Sweep, _calls

from agentgate.audit.spans import DENIED, execute_tool_span, record_decision
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.errors import ScopeCreep, StoreError
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, BreakerPolicy, Scheduler, SchedulerConfig, ToolCall

sweep = test_observability.sweep  # the fixture, shared
exporter = test_audit_spans.exporter  # the fixtures, shared: a tracer exporting into memory
tracer = test_audit_spans.tracer


# --- a refusal raised through its span keeps agentgate.denied ------------------------------------


def test_a_deny_raised_out_of_its_span_keeps_agentgate_denied_and_its_reasons(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(ScopeCreep), execute_tool_span("ask_helper", tracer=tracer) as span:
        record_decision(span, "deny", audit_index=3, reason="the policy does not let boss hand on tool:vault")
        raise ScopeCreep("refused")
    (finished,) = exporter.get_finished_spans()
    assert finished.attributes is not None and finished.attributes["error.type"] == DENIED
    assert finished.status.status_code == StatusCode.ERROR
    assert finished.status.description == "the policy does not let boss hand on tool:vault"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_refused_delegations_span_says_denied_not_the_exceptions_class(sweep: Sweep, mode: str) -> None:
    """A delegation the policy refuses (``ask_helper`` handing on a tool the boss may not hand
    on) was exported with ``error.type=ScopeCreep`` and the bare class name as its description:
    the AuthorityError leaving the span overwrote the refusal recorded on it, so a dashboard of
    ``error.type=agentgate.denied`` (docs/operations.md) missed every refused delegation. The
    refusal is on the ``delegate agent:helper`` span, and on that span only (review R54: the
    ``execute_tool ask_helper`` span around it said denied too, so the dashboard counted it
    twice); the tool's span fails with the exception's class, as any tool call that raises."""
    tools = sweep.tools()
    helper = create_gated_agent(
        sweep.gate,
        name="helper",
        model=ScriptedChatModel(turns=[AIMessage(content="helped")]),
        tools=tools[:1],
    )
    ask = delegation_tool(
        sweep.gate,
        name="helper",
        agent=helper,
        key=sweep.keys["helper"],
        capabilities=["tool:vault"],
        ttl=timedelta(minutes=5),
    )
    model = ScriptedChatModel(turns=[_calls(("ask_helper", {"task": "help"})), AIMessage(content="done")])
    boss = create_gated_agent(sweep.gate, name="boss", model=model, tools=[*tools, ask])
    start = {"messages": [{"role": "user", "content": "go"}]}
    result = (
        boss.invoke(start, context=sweep.boss)
        if mode == "sync"
        else asyncio.run(boss.ainvoke(start, context=sweep.boss))
    )
    (message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "error"
    spans = sweep.exporter.get_finished_spans()
    (span,) = [s for s in spans if dict(s.attributes or {}).get("error.type") == DENIED]
    assert span.name == "delegate agent:helper" and span.attributes is not None
    assert span.attributes["agentgate.decision"] == "deny"
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description is not None and "tool:vault" in span.status.description
    (tool,) = [s for s in spans if s.name == "execute_tool ask_helper"]
    assert "agentgate.decision" not in dict(tool.attributes or {})
    assert dict(tool.attributes or {})["error.type"] == "ScopeCreep"
    assert tool.status.status_code == StatusCode.ERROR


# --- a streamed gateway call whose backend fails -------------------------------------------------

CANARY = "CANARY-PROMPT-7731"


class _FailingStream(BaseHTTPRequestHandler):
    """An OpenAI-compatible backend that streams one chunk, then reports an error quoting the
    prompt (as engines do: "cannot render the prompt ...") in vLLM's mid-stream error event."""

    protocol_version = "HTTP/1.0"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}],
        }
        error = {"object": "error", "message": f"cannot render the prompt {body['messages'][0]['content']!r}"}
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(
            f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode()
        )

    def do_GET(self) -> None:
        out = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def failing_backend() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FailingStream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_streamed_calls_failure_exports_its_class_name_and_no_backend_text(
    tmp_path: Path, failing_backend: str, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """docs/operations.md: an exception from the call is ERROR with ``error.type`` its class name,
    its message never exported; argument values and prompts are never recorded. A streamed
    gateway call whose backend failed after output was exported with ``error.type`` (and the
    status description) ``BackendFailed: stream from echo broke after output: echo: the backend
    reported an error: "cannot render the prompt 'hello CANARY...'"``: the backend's text, which
    here quotes the prompt, in a trace, and one ``error.type`` value per failure message. The
    same failure of a JSON call exports ``BackendFailed`` alone."""
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=tracer)
    inventory = inventory_from_mapping(
        {"backends": [{"name": "echo", "url": failing_backend, "engine": "openai", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"hello {CANARY}"}],
            "max_tokens": 8,
            "stream": True,
        }
        answer = _http.post(
            f"{server.url}/chat/completions",
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json", **invocation_headers(agent.key, agent.chain, body)},
            timeout=20,
        )
        assert answer.status_code == 200 and "backend_failed" in answer.text
        assert CANARY not in answer.text  # the caller is not told the backend's text either
    finally:
        server.stop()
        gate.close()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == f"chat {MODEL}"]
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None and span.attributes["agentgate.outcome"] == "error"
    assert span.attributes["error.type"] == "BackendFailed"
    assert CANARY not in "\n".join(s.to_json() for s in exporter.get_finished_spans())


# --- breaker_not_shared names the breaker key ----------------------------------------------------


def test_a_breaker_transition_not_shared_is_counted_under_its_breaker_key(tmp_path: Path) -> None:
    """docs/tasks.md, Visibility: for ``breaker_*`` events the ``tool`` label holds the breaker
    key (``tool:search``). A transition the store could not publish to the other processes was
    counted as ``breaker_not_shared{tool="agentgate-breaker-tool:search"}``: a label no query on
    the breaker key (nor on ``agentgate_tasks_breaker_state{key}``) matches."""

    async def trip() -> Scheduler:
        scheduler = Scheduler(
            SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1)), store=SQLiteStore(tmp_path / "a.db")
        )
        shared = scheduler._shared_breakers
        assert shared is not None

        def unavailable(*args: object, **kwargs: object) -> None:
            raise StoreError("the store is unavailable")

        shared.publish = unavailable  # type: ignore[method-assign]

        async def refused(attempt: Attempt) -> None:
            raise ConnectionRefusedError("refused")

        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("search"), refused)
        for _ in range(100):  # the publication runs in a background task
            if any(event == "breaker_not_shared" for event, _ in scheduler.metrics.events):
                break
            await asyncio.sleep(0.01)
        await scheduler.aclose()
        return scheduler

    scheduler = asyncio.run(trip())
    registry = scheduler.registry
    assert registry.get_sample_value("agentgate_tasks_breaker_state", {"key": "tool:search"}) == 2
    assert (
        registry.get_sample_value(
            "agentgate_tasks_events_total", {"event": "breaker_not_shared", "tool": "tool:search"}
        )
        == 1
    )
