"""A refusal's span names the finding it was refused with: its kind and its code.

The real OpenTelemetry SDK with its ``InMemorySpanExporter``; spans made by ``record_decision``
on a real tracer.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentgate.audit.spans import MAX_CALL_ID_CHARS, MAX_SPAN_FINDINGS, execute_tool_span, record_decision
from agentgate.findings import Finding, FindingKind


def _finding(code: str, kind: FindingKind = FindingKind.SCOPE_CREEP) -> Finding:
    return Finding(kind=kind, code=code, message="CANARY-MESSAGE pin=99")


def test_a_deny_records_each_findings_kind_and_code_and_no_message() -> None:
    """Review R62: a refusal's span had ``error.type=agentgate.denied`` and its reasons as the
    description, but not the finding the audit entry records (``kind:code``): refusals could not
    be told apart by kind (scope creep, a revoked chain) without parsing the description.
    ``agentgate.finding.kinds`` and ``agentgate.finding.codes`` list them, in order; a finding's
    message (which may quote an argument) is not recorded."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    findings = [
        _finding("call_not_covered"),
        _finding("revoked", FindingKind.NON_REVOCABLE_GRANT),
        _finding("c" * 1000),
        *(_finding(f"extra_{i}") for i in range(100)),
    ]
    with execute_tool_span("vault", tracer=provider.get_tracer("r62")) as span:
        record_decision(span, "deny", reason="outside the grant", findings=findings)
    (done,) = exporter.get_finished_spans()
    attributes = dict(done.attributes or {})
    assert done.status.status_code == StatusCode.ERROR
    assert attributes["error.type"] == "agentgate.denied"
    kinds, codes = attributes["agentgate.finding.kinds"], attributes["agentgate.finding.codes"]
    assert len(kinds) == len(codes) == MAX_SPAN_FINDINGS
    assert list(zip(kinds, codes, strict=True))[:3] == [
        ("scope_creep", "call_not_covered"),
        ("non_revocable_grant", "revoked"),
        ("scope_creep", "c" * MAX_CALL_ID_CHARS),
    ]
    assert "CANARY" not in done.to_json()


def test_a_decision_without_findings_records_none() -> None:
    """Review R62: an allow (no findings) carries no ``agentgate.finding.*`` attribute."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with execute_tool_span("lookup", tracer=provider.get_tracer("r62")) as span:
        record_decision(span, "allow")
    (done,) = exporter.get_finished_spans()
    assert not any(name.startswith("agentgate.finding.") for name in done.attributes or {})
