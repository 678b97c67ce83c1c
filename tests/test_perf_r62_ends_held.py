"""``ends_held`` as a class (review R62, sixteenth performance pass): the rules its generator
form kept, checked on real spans exported in memory."""

from __future__ import annotations

import contextvars
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from agentgate.audit.spans import chat_span, ends_held, execute_tool_span


def _tracer() -> tuple[Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def _ended(exporter: InMemorySpanExporter) -> list[str]:
    return [span.name for span in exporter.get_finished_spans()]


def test_spans_end_when_the_outermost_block_leaves_in_the_order_they_left() -> None:
    """Review R62: spans whose blocks leave inside ``ends_held`` end only as its outermost
    block leaves (a nested block ends none), in the order their blocks left."""
    tracer, exporter = _tracer()
    with ends_held():
        with ends_held(), execute_tool_span("first", tracer=tracer):
            pass
        assert _ended(exporter) == []  # the nested block left: nothing ended yet
        with chat_span("second", tracer=tracer):
            pass
        assert _ended(exporter) == []
    assert _ended(exporter) == ["execute_tool first", "chat second"]


def test_spans_end_when_the_block_raises_and_the_error_goes_on() -> None:
    """Review R62: a block that raises still ends the spans it held, and its exception leaves
    unchanged; the next block holds its own again (nothing left set behind it)."""
    tracer, exporter = _tracer()
    with pytest.raises(KeyError, match="gone"), ends_held():
        with execute_tool_span("held", tracer=tracer):
            pass
        raise KeyError("gone")
    assert _ended(exporter) == ["execute_tool held"]
    with execute_tool_span("after", tracer=tracer):
        pass
    assert _ended(exporter) == ["execute_tool held", "execute_tool after"]


def test_another_thread_ends_its_own_spans_at_once() -> None:
    """Review R62: a thread running in a context copied from inside ``ends_held`` ends its spans
    itself, as they leave: only the thread that holds them holds ends back."""
    tracer, exporter = _tracer()
    seen: list[list[str]] = []

    def other() -> None:
        with execute_tool_span("other", tracer=tracer):
            pass
        seen.append(_ended(exporter))

    with ends_held():
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(other,))
        thread.start()
        thread.join()
    assert seen == [["execute_tool other"]]
