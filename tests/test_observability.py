"""What agentgate tells operators, and what it never tells anyone: spans, metrics, logs.

Real OpenTelemetry SDK with an in-memory exporter, real schedulers and Prometheus registries, real
Gates on SQLite files, real LangGraph agents driven by ``ScriptedChatModel``, the gateway over
real HTTP on 127.0.0.1. Canary secrets are planted in every place a secret can come from, and
every exported byte (spans, metrics, logs at DEBUG, messages to models, HTTP answers) is grepped.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

# --- metrics: schedulers sharing one registry ------------------------------------------------------


def _families(registry: CollectorRegistry) -> list[str]:
    """The metric family names of the registry's exposition, in order, repeats kept."""
    return [f.name for f in text_string_to_metric_families(generate_latest(registry).decode())]


def _samples(registry: CollectorRegistry, name: str) -> list[tuple[dict[str, str], float]]:
    """Every exported sample called ``name``, with its labels."""
    text = generate_latest(registry).decode()
    return [
        (s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    ]


def test_schedulers_sharing_a_registry_export_each_family_once_with_summed_counts() -> None:
    """Several schedulers on one registry (documented: pass one to share it; a Gate makes one per
    event loop) exported every family once per scheduler: the same series twice, which Prometheus
    refuses ('second TYPE line'); a registry that checks names (prometheus_client's global
    REGISTRY) raised DuplicateTimeseries when the second scheduler was made."""
    registry = CollectorRegistry()
    first = Scheduler(registry=registry)
    with SyncScheduler(registry=registry) as second:
        assert second.submit(ToolCall("lookup"), lambda attempt: 1) == 1

        async def once() -> None:
            async def run(attempt: Attempt) -> int:
                return 2

            await first.submit(ToolCall("lookup"), run)
            await first.aclose()

        asyncio.run(once())
        families = _families(registry)
        assert sorted(families) == sorted(set(families)), families
        assert (
            registry.get_sample_value("agentgate_tasks_events_total", {"event": "started", "tool": "lookup"})
            == 2
        )
        assert registry.get_sample_value("agentgate_tasks_wait_seconds_count") == 2

    checked = CollectorRegistry(auto_describe=True)  # as prometheus_client.REGISTRY
    Scheduler(registry=checked)
    Scheduler(registry=checked)  # raised DuplicateTimeseries
    assert sorted(_families(checked)) == sorted(set(_families(checked)))


def test_a_shared_registry_counts_shared_limits_once_and_keeps_a_dropped_schedulers_counts() -> None:
    """Schedulers sharing their admission state (a Gate's sync and async paths) read the same
    in-flight counts: exported once, not once per scheduler. A scheduler that is gone leaves its
    events in the counter (a counter never goes down)."""
    registry = CollectorRegistry()
    config = SchedulerConfig(tools={"slow": ToolLimits(concurrency=2)})
    sync = SyncScheduler(config, registry=registry)
    try:
        other = Scheduler(limits=sync.scheduler.shared, registry=registry)
        release, started = threading.Event(), threading.Event()

        def hold(attempt: Attempt) -> str:
            started.set()
            release.wait(5)
            return "done"

        worker = threading.Thread(target=sync.submit, args=(ToolCall("slow"), hold))
        worker.start()
        try:
            assert started.wait(5)
            assert _samples(registry, "agentgate_tasks_in_flight") == [({"tool": "slow"}, 1.0)]
        finally:
            release.set()
            worker.join(5)
        del other
        gone = Scheduler(registry=registry)
        gone.metrics.event("shed", "slow", {})
        del gone
        gc.collect()
        assert (
            registry.get_sample_value("agentgate_tasks_events_total", {"event": "shed", "tool": "slow"}) == 1
        )
        assert (
            registry.get_sample_value("agentgate_tasks_events_total", {"event": "started", "tool": "slow"})
            == 1
        )
    finally:
        sync.close()


@pytest.mark.parametrize("tools", [1, 3])
def test_each_scheduler_of_its_own_still_reports_only_its_own_calls(tools: int) -> None:
    """Without a shared registry nothing changes: a scheduler's registry holds its calls only."""
    with SyncScheduler() as mine, SyncScheduler() as theirs:
        for i in range(tools):
            mine.submit(ToolCall(f"t{i}"), lambda attempt: None)
        theirs.submit(ToolCall("t0"), lambda attempt: None)
        assert (
            mine.registry.get_sample_value("agentgate_tasks_events_total", {"event": "started", "tool": "t0"})
            == 1
        )
        assert sum(value for _, value in _samples(mine.registry, "agentgate_tasks_events_total")) == tools


# --- no secret leaves: a whole LangGraph run, every sink grepped -----------------------------------

SWEEP_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
  helper: {{kind: agent, did: "{helper}", roles: [helper]}}
  dana: {{kind: human, did: "{dana}", roles: [owner]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}, secret: {{type: string}}}}
    loggable: [id]
  vault:
    args: {{pin: {{type: string, required: true}}}}
  transfer:
    args: {{to: {{type: string, required: true}}, memo: {{type: string}}}}
    loggable: [to]
  explode:
    args: {{password: {{type: string, required: true}}}}
models:
  scripted: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:vault
        constraints: {{pin: {{prefix: "12"}}}}
      - resource: tool:transfer
      - resource: tool:explode
      - resource: model:scripted
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:lookup
        - resource: model:scripted
  helper:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: model:scripted
    ttl_s: 600
  owner:
    kind: human
    capabilities:
      - resource: tool:transfer
    ttl_s: 3600
approvals:
  transfers:
    resource: tool:transfer
    approvers: [dana]
"""


def _span_bytes(exporter: InMemorySpanExporter) -> str:
    """Everything the exporter would send: names, attributes, events, links, status, resource."""
    return "\n".join(span.to_json() for span in exporter.get_finished_spans())


def _secret_forms(secret: bytes) -> list[str]:
    return [
        secret.hex(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
    ]


def _calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": n, "args": a, "id": f"{n}-{i}"} for i, (n, a) in enumerate(calls)]
    )


class Sweep:
    """A traced Gate on a SQLite file with the sweep policy, its keys, and the boss's root grant."""

    def __init__(self, path: Path) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.keys = {n: SigningKey.generate() for n in ("root", "boss", "helper", "dana")}
        policy = parse_policy(
            SWEEP_POLICY.format(**{n: k.did for n, k in self.keys.items()}), source="s.yaml"
        )
        self.gate = Gate(policy, SQLiteStore(path / "agentgate.db"), tracer=provider.get_tracer("r9"))
        self.boss = self.gate.issue(self.keys["root"], name="boss", key=self.keys["boss"], role="boss")

    def tools(self) -> list[BaseTool]:
        def lookup(id: str, secret: str = "") -> str:
            return f"found {id}"

        def vault(pin: str) -> str:
            return "open"

        def transfer(to: str, memo: str = "") -> str:
            return f"sent to {to}"

        def explode(password: str) -> str:
            raise RuntimeError(f"login failed with {password}")

        return [
            StructuredTool.from_function(func=f, name=f.__name__, description=f.__name__)
            for f in (lookup, vault, transfer, explode)
        ]


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    made = Sweep(tmp_path)
    yield made
    made.gate.close()


def test_no_secret_reaches_spans_logs_or_tool_messages_in_a_whole_agent_run(
    sweep: Sweep, caplog: pytest.LogCaptureFixture
) -> None:
    """A supervisor and its sub-agent: allowed calls with non-loggable arguments, a refusal that
    quotes one, a tool whose exception names a password, a delegation, an approval. No argument
    value the policy does not mark loggable, no token, private key or approval signature is in
    any exported span, any log record (DEBUG, every logger), any message of the run (the refusal
    may quote the model's own argument back to it: the model wrote it)."""
    gate, tools = sweep.gate, sweep.tools()
    helper = create_gated_agent(
        gate,
        name="helper",
        model=ScriptedChatModel(
            turns=[_calls(("lookup", {"id": "h", "secret": "CANARY-HELPER"})), AIMessage(content="helped")]
        ),
        tools=tools[:1],
    )
    ask = delegation_tool(
        gate,
        name="helper",
        agent=helper,
        key=sweep.keys["helper"],
        capabilities=["tool:lookup", "model:scripted"],
        ttl=timedelta(minutes=5),
    )
    model = ScriptedChatModel(
        turns=[
            _calls(
                ("lookup", {"id": "1", "secret": "CANARY-LOOKUP"}),
                ("vault", {"pin": "99-CANARY-PIN"}),
                ("explode", {"password": "CANARY-PASSWORD"}),
                ("ask_helper", {"task": "help"}),
            ),
            _calls(("transfer", {"to": "acct-7", "memo": "CANARY-MEMO"})),
            AIMessage(content="all done"),
        ]
    )
    boss = create_gated_agent(
        gate, name="boss", model=model, tools=[*tools, ask], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    with caplog.at_level(logging.DEBUG):
        paused = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, config, context=sweep.boss)
        payload = paused["__interrupt__"][0].value
        approval = gate.approve(payload, sweep.keys["dana"])
        done = boss.invoke(Command(resume=approval), config, context=sweep.boss)
        gate.flush()
    children = [child for _, child in gate.delegations]
    secrets = [
        sweep.boss.chain.token,
        *(child.chain.token for child in children),
        approval["signature"],
        *(form for key in sweep.keys.values() for form in _secret_forms(key.seed)),
        *_secret_forms(bytes.fromhex(approval["signature"])),
    ]
    values = ["CANARY-HELPER", "CANARY-LOOKUP", "CANARY-PIN", "CANARY-PASSWORD", "CANARY-MEMO"]
    messages = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in messages if m.status == "success"] == ["found 1", "helped", "sent to acct-7"]
    spans, logs = _span_bytes(sweep.exporter), caplog.text
    told = "\n".join(str(m.content) for m in messages)
    assert "execute_tool vault" in spans and "execute_tool transfer" in spans
    for secret in [*secrets, *values]:
        assert secret not in spans, secret
        assert secret not in logs, secret
        assert secret not in json.dumps(payload), secret
    for secret in [*secrets, *values[:2], *values[3:]]:
        assert secret not in told, secret
    assert "CANARY-PIN" in told  # the refusal tells the model what it asked for


# --- the gateway over real HTTP -------------------------------------------------------------------


@pytest.fixture(scope="module")
def scripted() -> Iterator[Any]:
    from test_gateway_end_to_end import _Scripted

    backend = _Scripted().start()
    yield backend
    backend.stop()


def test_the_gateway_exports_no_token_key_or_prompt(
    tmp_path: Path, scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Allowed, refused (grant, missing and forged invocation, unreadable bearer), approval asked,
    a stream the backend cut: no chain token, invocation, private key or prompt text is in a span,
    a log record (DEBUG), /metrics, /healthz or an answer's error; every call has a span."""
    from test_gateway import MODEL, NAMES, OTHER, _policy_text

    from agentgate.dispatch import inventory_from_mapping
    from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    keys = {n: SigningKey.generate() for n in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=provider.get_tracer("r9"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "scripted", "url": scripted.url, "engine": "vllm", "models": [MODEL, OTHER]}]}
    )
    scripted.mode = "ok"
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    url, root = f"{server.url}/chat/completions", server.url.removesuffix("/v1")
    invocations: list[str] = []

    def body(**extra: Any) -> dict[str, Any]:
        return {
            "model": MODEL,
            "messages": [{"role": "user", "content": "CANARY-PROMPT hi"}],
            "max_tokens": 8,
            **extra,
        }

    def post(sent: dict[str, Any], **headers: str) -> httpx.Response:
        signed = invocation_headers(agent.key, agent.chain, sent)
        invocations.append(signed["X-Agentgate-Invocation"])
        return _http.post(url, json=sent, headers={**signed, **headers}, timeout=10)

    answers: list[httpx.Response] = []
    try:
        with caplog.at_level(logging.DEBUG):
            answers.append(post(body()))
            answers.append(post(body(max_tokens=600)))  # over the grant's max_tokens: refused
            answers.append(post(body(model=OTHER, max_tokens=200)))  # approval required
            answers.append(
                _http.post(url, json=body(), headers={"Authorization": f"Bearer {agent.chain.token}"})
            )
            answers.append(post(body(), **{"X-Agentgate-Invocation": invocations[0][:-8] + "AAAAAAAA"}))
            answers.append(
                _http.post(url, json=body(), headers={"Authorization": "Bearer ag1.CANARY-BEARER"})
            )
            scripted.mode = "die"
            answers.append(post(body(stream=True)))
            scripted.mode = "ok"
            health = _http.get(f"{root}/healthz", timeout=10)
            metrics = _http.get(f"{root}/metrics", timeout=10)
    finally:
        scripted.mode = "ok"
        server.stop()
        gate.close()
    assert [a.status_code for a in answers] == [200, 403, 403, 401, 401, 401, 200]
    assert health.json() == {"status": "ok"}
    spans = _span_bytes(exporter)
    secrets = [
        agent.chain.token,
        *invocations,
        "CANARY-BEARER",
        "CANARY-PROMPT",
        *(form for key in keys.values() for form in _secret_forms(key.seed)),
    ]
    for secret in secrets:
        for where, text in [
            ("spans", spans),
            ("logs", caplog.text),
            ("metrics", metrics.text),
            ("health", health.text),
            *((f"answer {i}", a.text) for i, a in enumerate(answers) if a.status_code != 200),
        ]:
            assert secret not in text, (secret[:16], where)
    # docs/gateway.md's metrics, as documented: answers by status, tokens by kind, decision times.
    exported = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(metrics.text)
        for s in f.samples
    }
    assert exported[("agentgate_gateway_requests_total", (("status", "200"),))] == 2
    assert exported[("agentgate_gateway_requests_total", (("status", "403"),))] == 2
    assert exported[("agentgate_gateway_requests_total", (("status", "401"),))] == 3
    assert exported[("agentgate_gateway_tokens_total", (("kind", "completion"),))] >= 8
    assert exported[("agentgate_gateway_tokens_total", (("kind", "prompt"),))] > 0
    assert exported[("agentgate_gateway_decision_seconds_count", ())] >= 2
    chat_spans = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert len(chat_spans) == 7  # every decided call has its span, the approval request too
    decisions = [(s.attributes or {}).get("agentgate.decision") for s in chat_spans]
    assert "approval_required" in decisions
    died = [s for s in chat_spans if (s.attributes or {}).get("agentgate.outcome") == "error"]
    assert len(died) == 1 and died[0].status.status_code is StatusCode.ERROR  # the backend died mid-stream


# --- nesting ----------------------------------------------------------------------------------------


def _parents(exporter: InMemorySpanExporter) -> dict[str, str | None]:
    """Each span's name (with its tool call id) -> its parent's, over the finished spans."""
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def label(span: Any) -> str:
        call_id = (span.attributes or {}).get("gen_ai.tool.call.id")
        return f"{span.name}#{call_id}" if call_id else span.name

    out: dict[str, str | None] = {}
    for span in spans:
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        out[label(span)] = label(parent) if parent is not None else None
    return out


def test_calls_made_inside_a_call_nest_under_it_sync_and_async_without_crossing(sweep: Sweep) -> None:
    """A tool that makes gated calls of its own (sync, under the scheduler; async, three at once
    with gather): each inner call's span is a child of its own outer call's span, never of a
    sibling's, so the scheduler's threads and tasks carry the caller's context."""
    gate, boss = sweep.gate, sweep.boss

    def inner_sync() -> str:
        inner = gate.authorize(boss, Call.tool("lookup", {"id": "in"}), call_id="in-s")
        return gate.run(inner, lambda: "x", call_id="in-s")

    outer = gate.authorize(boss, Call.tool("vault", {"pin": "12-34"}), call_id="out-s")
    gate.run(outer, inner_sync, call_id="out-s")

    async def both() -> None:
        async def inner_async(n: int) -> str:
            inner = await gate.to_thread(
                gate.authorize, boss, Call.tool("lookup", {"id": str(n)}), call_id=f"in-{n}"
            )
            return await gate.arun(inner, lambda: asyncio.sleep(0.01, "y"), call_id=f"in-{n}")

        async def outer_async(n: int) -> str:
            auth = await gate.to_thread(
                gate.authorize, boss, Call.tool("vault", {"pin": f"12-{n}"}), call_id=f"out-{n}"
            )
            return await gate.arun(auth, lambda: inner_async(n), call_id=f"out-{n}")

        await asyncio.gather(*(outer_async(n) for n in range(3)))

    asyncio.run(both())
    gate.flush()  # a call's span ends once its outcome is written (review R69)
    parents = _parents(sweep.exporter)
    assert parents["execute_tool lookup#in-s"] == "execute_tool vault#out-s"
    for n in range(3):
        assert parents[f"execute_tool lookup#in-{n}"] == f"execute_tool vault#out-{n}"
        assert parents[f"execute_tool vault#out-{n}"] is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parallel_tool_calls_of_an_agent_are_siblings(sweep: Sweep, mode: str) -> None:
    """One model turn with three tool calls (LangGraph runs them on a thread pool, or gathers them):
    each call's span is a child of the caller's span, none of another call's."""
    tracer = sweep.gate.tracer
    model = ScriptedChatModel(
        turns=[_calls(*(("lookup", {"id": str(n)}) for n in range(3))), AIMessage(content="done")]
    )
    agent = create_gated_agent(sweep.gate, name="boss", model=model, tools=sweep.tools())
    start = {"messages": [{"role": "user", "content": "go"}]}
    with tracer.start_as_current_span("app"):
        if mode == "sync":
            agent.invoke(start, context=sweep.boss)
        else:
            asyncio.run(agent.ainvoke(start, context=sweep.boss))
    parents = _parents(sweep.exporter)
    assert [parents[f"execute_tool lookup#lookup-{n}"] for n in range(3)] == ["app"] * 3
