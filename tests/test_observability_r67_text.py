"""Every text a span holds is valid UTF-8, as OTLP carries text: a name the caller gave that holds
a lone surrogate (a tool name in a model's tool call, ``"\\ud800"`` in its JSON; a resource of a
call built by hand) reaches the span as the audit log records it, with what is not Unicode
escaped (``recordable``). Each test failed on the code before its fix."""

from __future__ import annotations

import dataclasses

import pytest
import test_observability
from langchain_core.messages import AIMessage, ToolMessage
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_observability import Sweep

from agentgate.audit.spans import (
    MAX_CALL_ID_CHARS,
    approval_span,
    chat_span,
    decision_span,
    execute_tool_span,
    get_tracer,
    grant_span,
    invoke_agent_span,
    lease_outcome_span,
    record_decision,
    record_outcome,
    record_revocation,
    record_usage,
    revoke_span,
)
from agentgate.authority import issue
from agentgate.capabilities import Call
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

sweep = test_observability.sweep  # the fixture, shared


def _texts(span: ReadableSpan) -> list[str]:
    """The span's name, status description and every text attribute (in lists too)."""
    texts = [span.name, span.status.description or ""]
    for value in (span.attributes or {}).values():
        texts += [v for v in (value if isinstance(value, tuple | list) else [value]) if isinstance(v, str)]
    return texts


def _not_utf8(span: ReadableSpan) -> list[str]:
    """The texts of ``span`` that UTF-8 cannot encode (what an OTLP exporter fails on)."""
    bad = []
    for text in _texts(span):
        try:
            text.encode()
        except UnicodeEncodeError:
            bad.append(text)
    return bad


@pytest.mark.parametrize(
    "resource",
    ["gpu:\ud800", "model:\udcff", "tool:lo\ud800", "model:" + "\ud800" * 300],
)
def test_a_refused_resource_that_is_not_unicode_reaches_the_span_as_the_log_records_it(
    sweep: Sweep, resource: str
) -> None:
    """Review R67: Gate.authorize of a call whose resource holds a lone surrogate recorded its
    deny (the log escapes the resource: ``recordable``), but its span carried the surrogate raw
    in its name and in agentgate.resource / gen_ai.request.model / gen_ai.tool.name: an OTLP
    exporter cannot encode it, and the whole batch the refusal's span was in was lost."""
    call = Call(resource, "lease" if resource.startswith("gpu:") else "invoke", {})
    refused = sweep.gate.authorize(sweep.boss, call)
    assert refused.verdict == "deny"
    (span,) = [
        s
        for s in sweep.exporter.get_finished_spans()
        if (s.attributes or {}).get("agentgate.audit.index") == refused.audit_index
    ]
    assert _not_utf8(span) == []
    entry = sweep.gate.audit.entry(refused.audit_index)
    assert entry.resource is not None
    kind, _, logged = entry.resource.partition(":")
    named = {"gpu": "agentgate.resource", "model": "gen_ai.request.model", "tool": "gen_ai.tool.name"}[kind]
    shown = (span.attributes or {})[named]
    assert isinstance(shown, str)
    assert shown == (entry.resource if kind == "gpu" else logged)[:MAX_CALL_ID_CHARS]


def test_a_tool_call_with_an_id_and_a_resource_that_is_not_unicode_is_refused_and_traced(
    sweep: Sweep,
) -> None:
    """Review R67: Gate.authorize of a tool call with a call id whose resource holds a lone
    surrogate raised InputError (the refusal looked for an approval request of the call to close,
    and the call's approval hash cannot encode the resource): no deny entry, no span, and the
    LangGraph middleware's refusal of a model's tool call so named went unrecorded."""
    before = sweep.gate.audit.size()
    refused = sweep.gate.authorize(sweep.boss, Call("tool:lo\ud800", "invoke", {}), call_id="c1")
    assert refused.verdict == "deny"
    assert refused.audit_index == before
    (span,) = [
        s
        for s in sweep.exporter.get_finished_spans()
        if (s.attributes or {}).get("agentgate.audit.index") == refused.audit_index
    ]
    assert (span.attributes or {})["gen_ai.tool.call.id"] == "c1"
    assert _not_utf8(span) == []


def test_a_models_tool_call_named_with_a_lone_surrogate_is_refused_on_a_span_that_encodes(
    sweep: Sweep,
) -> None:
    """Review R67: a model's tool call named ``"lo\\ud800"`` (JSON carries a lone surrogate as an
    escape; a parsed tool call holds it raw) is refused and recorded by the middleware
    (``_refused_call``: ``tool:NAME`` as asked), and the refusal's span held the surrogate in its
    name and gen_ai.tool.name: an OTLP exporter cannot encode it, and the batch is lost."""
    model = ScriptedChatModel(
        turns=[
            AIMessage(content="", tool_calls=[{"name": "lo\ud800", "args": {"id": "1"}, "id": "c1"}]),
            AIMessage(content="done"),
        ]
    )
    agent = create_gated_agent(sweep.gate, name="boss", model=model, tools=sweep.tools()[:1])
    done = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss)
    (told,) = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert told.status == "error"
    spans = sweep.exporter.get_finished_spans()
    (refusal,) = [s for s in spans if (s.attributes or {}).get("agentgate.decision") == "deny"]
    assert [text for s in spans for text in _not_utf8(s)] == []
    assert (refusal.attributes or {})["gen_ai.tool.name"] == "lo\\ud800"


def test_an_agent_name_that_is_not_unicode_reaches_its_refusals_span_escaped(sweep: Sweep) -> None:
    """Review R67: an identity built by hand under a name holding a lone surrogate is refused
    (inherited_identity), and the refusal's span set the name raw as gen_ai.agent.name."""
    issued = sweep.gate.issue(sweep.keys["root"], name="a", key=sweep.keys["helper"], role="helper")
    outside = issue(
        sweep.keys["root"], sweep.keys["helper"].public, issued.chain.tip.capabilities, ttl=60, purpose="x"
    )
    agent = dataclasses.replace(issued, name="h\ud800", chain=outside)
    refused = sweep.gate.authorize(agent, Call.tool("lookup", {"id": "1"}))
    assert refused.verdict == "deny"
    (span,) = [
        s
        for s in sweep.exporter.get_finished_spans()
        if (s.attributes or {}).get("agentgate.audit.index") == refused.audit_index
    ]
    assert _not_utf8(span) == []
    assert (span.attributes or {})["gen_ai.agent.name"] == "h\\ud800"


def test_span_helpers_escape_text_that_is_not_unicode() -> None:
    """Review R67: every helper cut the text it was given to MAX_CALL_ID_CHARS characters
    (``_cut``) but left a lone surrogate in it: a span an OTLP exporter cannot encode."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = get_tracer(provider)
    odd = "x\ud800" * 150
    with invoke_agent_span(odd, agent_id=odd, tracer=tracer):
        with execute_tool_span(odd, call_id=odd, tracer=tracer) as span:
            record_decision(span, "deny", policy_id=odd, capability_id=odd, reason=odd)
        with chat_span(odd, provider=odd, tracer=tracer) as span:
            record_usage(span, 1, 1, response_model=odd)
            record_outcome(span, "error", error_type=odd)
        with decision_span(odd, odd, tracer=tracer):
            pass
        with grant_span("issue", odd, issuer=odd, audience=odd, parent=odd, resources=[odd], tracer=tracer):
            pass
        with revoke_span(odd, tracer=tracer) as span:
            record_revocation(span, odd, already=False)
        with approval_span(odd, odd, odd, audit_index=1, tracer=tracer):
            pass
        with lease_outcome_span(odd, odd, lease_id=odd, audit_index=2, tracer=tracer):
            pass
    spans = exporter.get_finished_spans()
    assert len(spans) == 8
    assert [text for s in spans for text in _not_utf8(s)] == []
    assert all(len(text) <= 2 * MAX_CALL_ID_CHARS + len("agent:") + 1 for s in spans for text in _texts(s))
    (tool,) = [s for s in spans if s.name.startswith("execute_tool ")]
    assert (tool.attributes or {})["gen_ai.tool.name"] == ("x\\ud800" * 150)[:MAX_CALL_ID_CHARS]
