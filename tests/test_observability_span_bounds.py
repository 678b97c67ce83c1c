"""What a caller names reaches a span cut to ``MAX_CALL_ID_CHARS`` characters: a call's resource
and action (a refused call built by hand, ``Call(resource, action, args)``), a tool's or model's
name, and an agent's name. A refusal's span must reach the exporter: one oversized value makes the
whole batch it is in too large to send, the deny with it. Each test failed on the code before its
fix."""

from __future__ import annotations

import dataclasses

import pytest
import test_observability
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_observability import Sweep

from agentgate._names import MAX_NAME_CHARS
from agentgate.audit.spans import (
    MAX_CALL_ID_CHARS,
    chat_span,
    decision_span,
    execute_tool_span,
    get_tracer,
    invoke_agent_span,
)
from agentgate.authority import issue
from agentgate.capabilities import Call

sweep = test_observability.sweep  # the fixture, shared

LONG = 100_000


def _longest_text(span: ReadableSpan) -> int:
    """The most characters of the span's name or of any one of its text attributes."""
    texts = [span.name, span.status.description or ""]
    texts += [v for v in (span.attributes or {}).values() if isinstance(v, str)]
    return max(len(t) for t in texts)


@pytest.mark.parametrize(
    "call",
    [
        # An action of 100,000 characters: a Call refuses it since review R56 (test_capabilities_call.py).
        pytest.param(lambda: Call("gpu:" + "x" * 20_000, "lease", {}), id="resource"),
        pytest.param(lambda: Call("tool:" + "x" * 20_000, "invoke", {}), id="tool-name"),
        pytest.param(lambda: Call("model:" + "x" * 20_000, "generate", {}), id="model-name"),
    ],
)
def test_a_refused_calls_span_holds_its_resource_and_action_within_bounds(sweep: Sweep, call: object) -> None:
    """Review R56: Gate.authorize of a hand-built Call with an action of 100,000 characters (or a
    resource of 20,000, refused as longer than 200) recorded its deny, and its span carried the
    action and the resource whole, in its name and in agentgate.action / agentgate.resource /
    gen_ai.tool.name / gen_ai.request.model: 200,000 characters for one refusal."""
    refused = sweep.gate.authorize(sweep.boss, call())  # type: ignore[operator]
    assert refused.verdict == "deny"
    (span,) = [
        s
        for s in sweep.exporter.get_finished_spans()
        if (s.attributes or {}).get("agentgate.audit.index") == refused.audit_index
    ]
    assert (span.attributes or {})["agentgate.decision"] == "deny"
    # "execute_tool " and "chat " before a name of MAX_CALL_ID_CHARS, "{action} {resource}" twice that.
    assert _longest_text(span) <= 2 * MAX_CALL_ID_CHARS + 1


def test_an_agents_name_reaches_its_calls_spans_within_bounds(sweep: Sweep) -> None:
    """Review R56: an agent issued under a name of 20,000 characters (Gate.issue bounded no name
    but by its audit entry's size; its grant span cut it to 200) put the whole name as
    gen_ai.agent.name on every span of every one of its calls. Gate.issue now refuses such a
    name (tests/test_gate_agent_names.py); an identity built by hand may still carry one, on a
    grant made outside the Gate (since review R66 a grant Gate.issue makes binds the name it was
    issued under, and the same grant under another name is refused: tests/test_gate_r66_granted_names.py).
    Since review R67 a decision refuses, on any grant, a name Gate.issue would not grant
    (tests/test_gate_r67_ungranted_names.py): the longest name it takes reaches the spans whole,
    within their bound."""
    issued = sweep.gate.issue(sweep.keys["root"], name="a", key=sweep.keys["helper"], role="helper")
    outside = issue(
        sweep.keys["root"],
        sweep.keys["helper"].public,
        issued.chain.tip.capabilities,
        ttl=60,
        purpose="role helper",
    )
    agent = dataclasses.replace(issued, name="a" * MAX_NAME_CHARS, chain=outside)
    auth = sweep.gate.authorize(agent, Call.tool("lookup", {"id": "1"}), call_id="c1")
    assert auth.allowed
    sweep.gate.run(auth, lambda: "found 1", call_id="c1")
    sweep.gate.flush()  # a call's span ends once its outcome is written (review R69)
    (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert (span.attributes or {})["gen_ai.agent.name"] == "a" * MAX_NAME_CHARS
    assert MAX_NAME_CHARS <= MAX_CALL_ID_CHARS
    refused = sweep.gate.authorize(
        dataclasses.replace(issued, name="a" * 20_000, chain=outside), Call.tool("lookup", {"id": "1"})
    )
    assert [f.code for f in refused.findings] == ["inherited_identity"]


def test_span_helpers_cut_the_names_they_are_given() -> None:
    """Review R56: invoke_agent_span, execute_tool_span, chat_span and decision_span put the
    names they were given on the span whole (only the call id was cut)."""
    exporter = InMemorySpanExporter()
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = get_tracer(provider)
    long = "n" * LONG
    with invoke_agent_span(long, agent_id="did:key:z", tracer=tracer):
        with execute_tool_span(long, call_id=long, tracer=tracer):
            pass
        with chat_span(long, provider="vllm", tracer=tracer):
            pass
        with decision_span(long, long, tracer=tracer):
            pass
    spans = exporter.get_finished_spans()
    assert len(spans) == 4
    assert all(_longest_text(s) <= 2 * MAX_CALL_ID_CHARS + 1 for s in spans), [
        _longest_text(s) for s in spans
    ]
    by_name = {s.name.split(" ")[0]: s.attributes or {} for s in spans}
    assert by_name["invoke_agent"]["gen_ai.agent.name"] == "n" * MAX_CALL_ID_CHARS
    assert by_name["execute_tool"]["gen_ai.tool.name"] == "n" * MAX_CALL_ID_CHARS
    assert by_name["chat"]["gen_ai.request.model"] == "n" * MAX_CALL_ID_CHARS
