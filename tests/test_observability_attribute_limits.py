"""Spans under a low attribute count limit (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``, the SDK's
``SpanLimits``): what a span decided and how it ended (``agentgate.audit.spans.ESSENTIAL``)
survives the limit, and an exception leaving a deny's span does not relabel it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer
from test_authority_findings_documented import Desk, desk  # noqa: F401 (the fixture)

from agentgate.audit.spans import (
    DENIED,
    execute_tool_span,
    get_tracer,
    record_decision,
    record_outcome,
)
from agentgate.capabilities import Call

LIMIT = 4


@pytest.fixture
def limited() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=LIMIT))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield get_tracer(provider), exporter
    provider.shutdown()


def _denied_then_raised(tracer: Tracer) -> None:
    with execute_tool_span("refund", call_id="c1", tracer=tracer) as span:
        record_decision(
            span,
            "deny",
            policy_id="p1",
            capability_id="c" * 64,
            chain_depth=1,
            budget_remaining=5,
            audit_index=7,
            reason="no grant covers tool:refund",
        )
        span.set_attribute("gen_ai.agent.name", "agent")
        span.set_attribute("agentgate.task.queue", "default")
        span.set_attribute("agentgate.task.attempt", 1)
        span.set_attribute("agentgate.task.wait_ms", 3)
        raise RuntimeError("carried out after the refusal")


def test_a_deny_keeps_its_outcome_under_a_low_attribute_limit_and_an_exception_does_not_relabel_it(
    limited: tuple[Tracer, InMemorySpanExporter],
) -> None:
    """Review R57: with 4 attributes a span, a deny's error.type was dropped and the exception then relabelled it RuntimeError."""
    tracer, exporter = limited
    with pytest.raises(RuntimeError):
        _denied_then_raised(tracer)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "no grant covers tool:refund"
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == DENIED and attributes["agentgate.decision"] == "deny"
    assert attributes["agentgate.audit.index"] == 7 and len(attributes) == LIMIT


def test_a_paused_call_stays_unset_when_its_outcome_attribute_was_dropped(
    limited: tuple[Tracer, InMemorySpanExporter],
) -> None:
    """Review R57: a pause's agentgate.outcome, dropped by the limit, let the exception carrying the pause out mark it ERROR."""
    tracer, exporter = limited
    with pytest.raises(LookupError), execute_tool_span("ask", call_id="c2", tracer=tracer) as span:
        record_decision(span, "allow", policy_id="p1", audit_index=3)
        record_outcome(span, "paused")
        for n in range(LIMIT):
            span.set_attribute(f"agentgate.task.note{n}", n)
        raise LookupError("interrupt")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.UNSET
    attributes = dict(span.attributes or {})
    assert attributes["agentgate.outcome"] == "paused" and "error.type" not in attributes
    assert attributes["agentgate.decision"] == "allow" and attributes["agentgate.audit.index"] == 3


def _refusal(spans: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool refund"]
    return span


def test_a_gate_refusal_span_keeps_its_decision_and_entry_under_a_low_attribute_limit(
    desk: Desk,  # noqa: F811 (the fixture)
) -> None:
    """Review R57: a Gate refusal's span under 4 attributes a span lost agentgate.decision and error.type."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=LIMIT))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    desk.gate.tracer = get_tracer(provider)
    refused = desk.gate.authorize(desk.agent, Call.tool("refund", {"amount": 5000}), call_id="r1")
    assert not refused.allowed
    span = _refusal(exporter)
    attributes = dict(span.attributes or {})
    assert attributes["agentgate.decision"] == "deny"
    assert attributes["error.type"] == DENIED
    assert attributes["agentgate.audit.index"] == refused.audit_index
    assert span.status.status_code is StatusCode.ERROR
