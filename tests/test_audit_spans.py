"""OpenTelemetry spans (agentgate/audit/spans.py): an exception leaves its class name on a span,
never its message; a paused call is not a failure; tool arguments and results reach a span only
when content capture is opted in; a chat span is a CLIENT span.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from test_dispatch_backends import KEY, _tracer

from agentgate.audit.spans import chat_span, execute_tool_span, record_outcome, record_tool_result


def test_an_exception_leaving_a_chat_span_exports_its_type_never_its_message() -> None:
    """Kills: the span status description set to ``str(exc)``, and ``record_exception=True`` (an
    exception event carrying the message and stack). Rule: a span that an exception left holds
    the exception's class name only: its message may quote the prompt or a key."""
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    with pytest.raises(ValueError), chat_span("m", provider="vllm", tracer=tracer):
        raise ValueError(f"prompt was: tell me the secret {KEY}")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "ValueError"
    everything = repr(span.to_json())
    assert KEY not in everything and "tell me the secret" not in everything


def test_a_paused_call_is_not_marked_failed_by_the_exception_carrying_the_pause() -> None:
    """Kills: ``_span`` marking ERROR whatever the recorded outcome (``paused`` dropped from the
    exemption). Rule: a tool call paused for an approval has not failed."""
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)

    class Interrupt(Exception):
        pass

    with pytest.raises(Interrupt), execute_tool_span("t", tracer=tracer) as span:
        record_outcome(span, "paused")
        raise Interrupt
    (done,) = exporter.get_finished_spans()
    assert done.status.status_code is StatusCode.UNSET
    assert done.attributes is not None and "error.type" not in done.attributes


def test_tool_arguments_are_not_recorded_without_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills: ``_capture`` reading anything but ``true`` as opted in, and ``execute_tool_span``
    recording arguments without asking ``_capture``. Rule: arguments reach a span only when
    content capture is opted in."""
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    for value in (None, "", "yes", "1", "false"):
        if value is None:
            monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
        else:
            monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
        with execute_tool_span("t", arguments={"password": "hunter2"}, tracer=tracer):
            pass
    assert all(
        "gen_ai.tool.call.arguments" not in (s.attributes or {}) for s in exporter.get_finished_spans()
    )
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "True")
    with execute_tool_span("t", arguments={"a": 1}, tracer=tracer):
        pass
    assert (exporter.get_finished_spans()[-1].attributes or {})["gen_ai.tool.call.arguments"] == '{"a":1}'


def test_a_chat_span_is_a_client_span_and_a_tool_result_needs_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills: ``chat_span`` made INTERNAL (a model call is a CLIENT span in the GenAI conventions),
    and ``record_tool_result`` recording without asking ``_capture``. Rule: a tool's result
    reaches a span only when content capture is opted in."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    with chat_span("m", tracer=tracer):
        pass
    with execute_tool_span("t", tracer=tracer) as span:
        record_tool_result(span, {"ssn": "123-45-6789"})
    chat, tool = exporter.get_finished_spans()
    assert chat.kind is SpanKind.CLIENT
    assert "gen_ai.tool.call.result" not in (tool.attributes or {})
