"""The public span helpers of ``agentgate.audit.spans`` called with what a tool or a caller hands
them: content that cannot be written is left out, never raised."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer

from agentgate.audit.spans import (
    MAX_CALL_ID_CHARS,
    approval_span,
    chat_span,
    execute_tool_span,
    get_tracer,
    grant_span,
    invoke_agent_span,
    lease_outcome_span,
    record_decision,
    record_outcome,
    record_revocation,
    record_tool_result,
    record_usage,
    revoke_span,
)


@pytest.fixture
def traced() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield get_tracer(provider), exporter
    provider.shutdown()


class _Unprintable:
    """A tool's result object whose text cannot be had."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this object")


@pytest.mark.parametrize("result", [_Unprintable(), {"row": _Unprintable()}], ids=["whole", "nested"])
def test_a_result_whose_text_raises_is_left_out_not_raised(
    traced: tuple[Tracer, InMemorySpanExporter], result: object
) -> None:
    """Review R60: record_tool_result raised the RuntimeError of a result object's __str__ (content capture on) after the tool ran."""
    tracer, exporter = traced
    with execute_tool_span("search", record_content=True, tracer=tracer) as span:
        record_tool_result(span, result, record_content=True)
    (ended,) = exporter.get_finished_spans()
    assert "gen_ai.tool.call.result" not in (ended.attributes or {})
    assert ended.status.status_code is StatusCode.UNSET


def _texts(span: ReadableSpan) -> list[str]:
    """Every text a span carries: its name and each text attribute, each item of a list one."""
    texts = [span.name]
    for value in (span.attributes or {}).values():
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, tuple | list):
            texts.extend(v for v in value if isinstance(v, str))
    return texts


def test_every_helper_cuts_each_text_it_is_given(traced: tuple[Tracer, InMemorySpanExporter]) -> None:
    """Review R60: approval_span, lease_outcome_span, grant_span, record_usage and others set some of their texts whole (a 100,000-character resource)."""
    tracer, exporter = traced
    long = "x" * 100_000
    with invoke_agent_span("agent", agent_id=long, tracer=tracer):
        pass
    with chat_span("m", provider=long, tracer=tracer) as span:
        record_usage(span, 1, 2, response_model=long)
        record_decision(span, "allow", policy_id=long, capability_id=long)
    with grant_span(long, "a", issuer=long, audience=long, parent=long, resources=[long], tracer=tracer):
        pass
    with revoke_span("op", tracer=tracer) as span:
        record_revocation(span, long, already=False)
    with approval_span(long, "did:key:z", "r1", audit_index=1, tracer=tracer):
        pass
    with lease_outcome_span(long, long, lease_id="l1", audit_index=2, tracer=tracer):
        pass
    spans = exporter.get_finished_spans()
    assert len(spans) == 6
    # A span's name joins two names (``{action} {resource}``), a grant's resource is ``agent:{name}``.
    bound = 2 * MAX_CALL_ID_CHARS + len(" agent:")
    assert all(len(text) <= bound for s in spans for text in _texts(s)), [
        (s.name[:20], max(map(len, _texts(s)))) for s in spans
    ]
    attributes = [dict(s.attributes or {}) for s in spans]
    assert all(
        len(value) <= MAX_CALL_ID_CHARS for a in attributes for value in a.values() if isinstance(value, str)
    )


def test_a_status_description_and_error_type_are_cut_too(traced: tuple[Tracer, InMemorySpanExporter]) -> None:
    """Review R60: a deny's reason, an outcome's error type and an exception's class name reached the span's status and error.type whole."""
    tracer, exporter = traced
    long = "x" * 100_000
    with execute_tool_span("a", tracer=tracer) as span:
        record_decision(span, "deny", reason=long)
    with execute_tool_span("b", tracer=tracer) as span:
        record_decision(span, "allow")
        record_outcome(span, "error", error_type=long)
    raised = type("E" * 100_000, (Exception,), {})
    with pytest.raises(raised), execute_tool_span("c", tracer=tracer):
        raise raised()
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    assert all(len(s.status.description or "") <= MAX_CALL_ID_CHARS for s in spans)
    assert all(len(str((s.attributes or {})["error.type"])) <= MAX_CALL_ID_CHARS for s in spans)
    assert [s.status.status_code for s in spans] == [StatusCode.ERROR] * 3
