"""The token usage on a model call's span (``gen_ai.usage.input_tokens``/``output_tokens``) is
what the call's audit outcome charges: two token counts, or nothing when the call reported
garbage, never a number the log refused nor one an OTLP exporter cannot carry. Each test failed
on the code before its fix."""

from __future__ import annotations

import pytest
import test_observability
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_observability import Sweep

from agentgate.audit.spans import get_tracer, record_usage
from agentgate.capabilities import Call

sweep = test_observability.sweep  # the fixture, shared

NOT_TOKEN_COUNTS = [
    pytest.param((-5, 3), id="negative"),
    pytest.param(("7", "2"), id="text"),
    pytest.param((True, 1), id="bool"),
    pytest.param((2.9, 1), id="fraction"),
    pytest.param((2**63, 1), id="past-int64"),
]


@pytest.mark.parametrize("usage", NOT_TOKEN_COUNTS)
def test_record_usage_leaves_out_what_is_not_two_token_counts(usage: tuple[object, object]) -> None:
    """Review R56: record_usage set int() of whatever it was given: -5, "7" as 7, True as 1, 2.9
    as 2, and 2**63, past the signed 64-bit integers OTLP carries (its encoder refuses the value,
    and the whole batch of spans, a deny's among them, is dropped)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with get_tracer(provider).start_as_current_span("chat m") as span:
        record_usage(span, *usage)  # type: ignore[arg-type]
        record_usage(span, 12, 2**63 - 1, response_model="m")
    (finished,) = exporter.get_finished_spans()
    assert finished.attributes == {
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 2**63 - 1,
        "gen_ai.response.model": "m",
    }
    with get_tracer(provider).start_as_current_span("chat m") as span:
        record_usage(span, *usage)  # type: ignore[arg-type]
    assert "gen_ai.usage.input_tokens" not in (exporter.get_finished_spans()[-1].attributes or {})


@pytest.mark.parametrize("usage", NOT_TOKEN_COUNTS[:4])
def test_a_model_calls_span_does_not_report_usage_its_outcome_refused(
    sweep: Sweep, usage: tuple[object, object]
) -> None:
    """Review R56: a model call whose ``spent`` reported garbage was charged as reserved, its
    outcome saying the usage is not two token counts, while its span said it used -5, 7, 1 or 2
    input tokens: the trace contradicted the evidence it links to."""
    auth = sweep.gate.authorize(sweep.boss, Call.model("scripted", {}), tokens=(10, 10))
    assert auth.allowed
    sweep.gate.run(auth, lambda: "answer", spent=lambda _: usage)  # type: ignore[arg-type,return-value]
    sweep.gate.flush()
    (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == "chat scripted"]
    attributes = dict(span.attributes or {})
    assert attributes["agentgate.outcome"] == "ok"
    assert "gen_ai.usage.input_tokens" not in attributes
    assert "gen_ai.usage.output_tokens" not in attributes
