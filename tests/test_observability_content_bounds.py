"""Opt-in content capture records each captured value (``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``) within ``MAX_CONTENT_BYTES`` (16 KiB) of UTF-8: a longer one is cut
where a character ends and marked ``agentgate.content.truncated.<attribute>=true``. One span
holding a 10 MB result makes its exporter's whole batch too large to send, the other spans of
the batch lost with it; until review R56 every captured value was recorded whole."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from agentgate.audit.spans import execute_tool_span, get_tracer, record_tool_result

MAX_CONTENT_BYTES = 16 * 1024
"""``agentgate.audit.spans.MAX_CONTENT_BYTES`` (``test_the_bound_is_16_kib``)."""
ARGUMENTS = "gen_ai.tool.call.arguments"
RESULT = "gen_ai.tool.call.result"


@pytest.fixture
def traced() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield get_tracer(provider), exporter
    provider.shutdown()


def _captured(traced: tuple[Tracer, InMemorySpanExporter], arguments: object, result: object) -> ReadableSpan:
    tracer, exporter = traced
    with execute_tool_span("search", arguments={"q": arguments}, record_content=True, tracer=tracer) as span:
        record_tool_result(span, result, record_content=True)
    (finished,) = exporter.get_finished_spans()
    return finished


def test_the_bound_is_16_kib() -> None:
    from agentgate.audit import spans

    assert spans.MAX_CONTENT_BYTES == MAX_CONTENT_BYTES
    assert spans.TRUNCATED == "agentgate.content.truncated."


@pytest.mark.parametrize("unit", ["x", "é", "研", "😀"], ids=["1-byte", "2-byte", "3-byte", "4-byte"])
def test_a_captured_value_past_the_bound_is_cut_on_a_character_and_marked(
    traced: tuple[Tracer, InMemorySpanExporter], unit: str
) -> None:
    """Review R56: content capture recorded a 10 MB tool argument and result whole on one span."""
    huge = unit * (10_000_000 // len(unit.encode()))  # 10 MB of UTF-8
    span = _captured(traced, huge, huge)
    attributes = span.attributes or {}
    whole_arguments = json.dumps({"q": huge}, ensure_ascii=False, separators=(",", ":"))
    for name, whole in ((ARGUMENTS, whole_arguments), (RESULT, huge)):
        kept = attributes[name]
        assert isinstance(kept, str)
        data = kept.encode()  # valid UTF-8: no character split by the cut
        assert MAX_CONTENT_BYTES - 3 <= len(data) <= MAX_CONTENT_BYTES
        assert whole.startswith(kept)
        assert attributes[f"agentgate.content.truncated.{name}"] is True


def test_a_captured_value_within_the_bound_is_whole_and_unmarked(
    traced: tuple[Tracer, InMemorySpanExporter],
) -> None:
    result = "研" * (MAX_CONTENT_BYTES // 3)  # 16,383 bytes
    span = _captured(traced, "find", result)
    attributes = span.attributes or {}
    assert attributes[ARGUMENTS] == '{"q":"find"}'
    assert attributes[RESULT] == result
    assert not [k for k in attributes if k.startswith("agentgate.content.truncated.")]


def test_a_result_of_exactly_the_bound_is_whole(traced: tuple[Tracer, InMemorySpanExporter]) -> None:
    span = _captured(traced, "find", "r" * MAX_CONTENT_BYTES)
    attributes = span.attributes or {}
    assert attributes[RESULT] == "r" * MAX_CONTENT_BYTES
    assert f"agentgate.content.truncated.{RESULT}" not in attributes
