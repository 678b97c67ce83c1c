"""Review R68: the span helpers an application calls for its own spans (``record_decision``,
``record_outcome``, ``execute_tool_span``) put some of what they are given on the span as given:
a text of any length or holding a lone surrogate, an integer past what OTLP carries. One such
attribute fails the OTLP export of the whole batch the span is in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from agentgate.audit.spans import (
    MAX_ATTRIBUTE_INT,
    MAX_CALL_ID_CHARS,
    approval_span,
    execute_tool_span,
    get_tracer,
    lease_outcome_span,
    record_decision,
    record_outcome,
    record_revocation,
    revoke_span,
)

LONG = "x" * 100_000
ODD = "bad\ud800name"


@pytest.fixture
def traced() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield get_tracer(provider), exporter
    provider.shutdown()


def _only(exporter: InMemorySpanExporter) -> dict[str, object]:
    (span,) = exporter.get_finished_spans()
    assert isinstance(span, ReadableSpan)
    return dict(span.attributes or {})


@pytest.mark.parametrize("text", [LONG, ODD])
def test_record_decision_and_record_outcome_cut_and_escape_their_texts(
    traced: tuple[Tracer, InMemorySpanExporter], text: str
) -> None:
    """Review R68: ``agentgate.decision`` (``record_decision``'s ``decision``) and
    ``agentgate.outcome`` (``record_outcome``'s ``status``) were set as given: 100,000
    characters, or a lone surrogate an OTLP exporter cannot encode."""
    tracer, exporter = traced
    with execute_tool_span("t", tracer=tracer) as span:
        record_decision(span, text)
        record_outcome(span, text)
    attributes = _only(exporter)
    for name in ("agentgate.decision", "agentgate.outcome"):
        value = attributes[name]
        assert isinstance(value, str) and len(value) <= MAX_CALL_ID_CHARS
        value.encode()


@pytest.mark.parametrize("text", [LONG, ODD])
def test_execute_tool_span_cuts_and_escapes_its_tool_type(
    traced: tuple[Tracer, InMemorySpanExporter], text: str
) -> None:
    """Review R68: ``gen_ai.tool.type`` was set as given, where every other name is cut."""
    tracer, exporter = traced
    with execute_tool_span("t", tool_type=text, tracer=tracer):
        pass
    value = _only(exporter)["gen_ai.tool.type"]
    assert isinstance(value, str) and len(value) <= MAX_CALL_ID_CHARS
    value.encode()


@pytest.mark.parametrize("value", [MAX_ATTRIBUTE_INT + 1, -(2**63) - 1, True, 2.5, "7"])
def test_record_decision_leaves_off_a_number_otlp_cannot_carry(
    traced: tuple[Tracer, InMemorySpanExporter], value: object
) -> None:
    """Review R68: ``budget_remaining``, ``chain_depth`` and ``audit_index`` were set as given: a
    count past 2**63 - 1 (which an OTLP exporter cannot encode, its whole batch lost), a bool, a
    fraction or text, as ``record_usage`` refused them until review R56. Such a value is left
    off; the decision is recorded."""
    tracer, exporter = traced
    with execute_tool_span("t", tracer=tracer) as span:
        record_decision(span, "allow", budget_remaining=value, chain_depth=value, audit_index=value)  # type: ignore[arg-type]
    attributes = _only(exporter)
    assert attributes["agentgate.decision"] == "allow"
    for name in ("agentgate.budget.remaining", "agentgate.chain.depth", "agentgate.audit.index"):
        assert name not in attributes, (name, attributes.get(name))


def test_record_decision_keeps_a_count_otlp_carries(traced: tuple[Tracer, InMemorySpanExporter]) -> None:
    """Review R68: the bound leaves every count OTLP carries as it is."""
    tracer, exporter = traced
    with execute_tool_span("t", tracer=tracer) as span:
        record_decision(span, "allow", budget_remaining=MAX_ATTRIBUTE_INT, chain_depth=0, audit_index=-1)
    attributes = _only(exporter)
    assert attributes["agentgate.budget.remaining"] == MAX_ATTRIBUTE_INT
    assert attributes["agentgate.chain.depth"] == 0
    assert attributes["agentgate.audit.index"] == -1


@pytest.mark.parametrize("value", [MAX_ATTRIBUTE_INT + 1, True, "7"])
def test_the_other_helpers_leave_off_a_number_otlp_cannot_carry(
    traced: tuple[Tracer, InMemorySpanExporter], value: Any
) -> None:
    """Review R68: ``approval_span``, ``lease_outcome_span`` and ``record_revocation`` set their
    entry indexes and counts as given, as ``record_decision`` did."""
    tracer, exporter = traced
    with approval_span("tool:t", "did:key:a", "r1", audit_index=value, tracer=tracer):
        pass
    with lease_outcome_span(
        "gpu:h100", "lease_granted", lease_id="l1", audit_index=value, ref=value, tracer=tracer
    ):
        pass
    with revoke_span("admin", tracer=tracer) as span:
        record_revocation(span, "g1", already=False, descendants=value, audit_index=value)
    for span in exporter.get_finished_spans():
        attributes = dict(span.attributes or {})
        for name in ("agentgate.audit.index", "agentgate.audit.ref", "agentgate.revoke.descendants"):
            assert name not in attributes, (span.name, name, attributes.get(name))
