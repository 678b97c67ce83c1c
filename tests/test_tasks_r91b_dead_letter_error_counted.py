"""Review R91b: a dead letter the store fails to write is counted as ``dead_letter_not_stored``,
an event on the call's span, and the caller gets the tool's error. A failure that is not a
``StoreError`` (a store's own bug) was counted differently on each path: the async core (since
review R91) tallied it with no span event, the sync scheduler without a store, which writes the
letter inline, did not count it at all. Both now count it as a ``StoreError`` is counted, span
event included; the caller still gets that error, as before."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _dead_letter_writes import FailingDeadLetters, async_core, sync_inline
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks._metrics import SchedulerMetrics


@pytest.fixture
def traced() -> tuple[Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


@pytest.mark.parametrize("path", [async_core, sync_inline], ids=["async", "sync"])
@pytest.mark.parametrize(
    ("error", "told"),
    [(StoreError("the store is down"), ValueError), (RuntimeError("a store driver's bug"), RuntimeError)],
    ids=["store_error", "other_error"],
)
def test_a_dead_letter_not_stored_is_counted_once_with_its_span_event_on_every_path(
    sqlite_store: SQLiteStore,
    traced: tuple[Tracer, InMemorySpanExporter],
    path: Callable[[DeadLetterStore, Tracer], tuple[SchedulerMetrics, BaseException]],
    error: Exception,
    told: type[Exception],
) -> None:
    tracer, exporter = traced
    metrics, raised = path(FailingDeadLetters(sqlite_store, error), tracer)
    assert type(raised) is told  # the tool's error past a StoreError, as before R91b
    assert metrics.count("dead_letter_not_stored", "t") == 1
    [span] = exporter.get_finished_spans()
    events = [event.name for event in span.events]
    assert events.count("agentgate.task.dead_letter_not_stored") == 1, events
