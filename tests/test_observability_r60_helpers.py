"""The public span helpers of ``agentgate.audit.spans`` called with what a tool or a caller hands
them: content that cannot be written is left out, never raised."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer

from agentgate.audit.spans import execute_tool_span, get_tracer, record_tool_result


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
