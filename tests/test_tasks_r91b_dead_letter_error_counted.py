"""Review R91b: a dead letter the store fails to write is counted as ``dead_letter_not_stored``,
an event on the call's span, and the caller gets the tool's error. A failure that is not a
``StoreError`` (a store's own bug) was counted differently on each path: the async core (since
review R91) tallied it with no span event, the sync scheduler without a store, which writes the
letter inline, did not count it at all. Both now count it as a ``StoreError`` is counted, span
event included; the caller still gets that error, as before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall
from agentgate.tasks._metrics import SchedulerMetrics


class _FailingDeadLetters(DeadLetterStore):
    """A dead-letter store whose every write fails with ``error``."""

    def __init__(self, store: SQLiteStore, error: Exception) -> None:
        super().__init__(store)
        self.error = error

    def record(self, letter: DeadLetter) -> None:
        raise self.error


def _failing_tool(attempt: Attempt) -> str:
    raise ValueError("bad input")


async def _failing_async_tool(attempt: Attempt) -> str:
    raise ValueError("bad input")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


@pytest.fixture
def traced() -> tuple[Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def _async_core(dead_letters: DeadLetterStore, tracer: Tracer) -> tuple[SchedulerMetrics, BaseException]:
    scheduler = Scheduler(dead_letters=dead_letters)

    async def run() -> BaseException:
        try:
            with tracer.start_as_current_span("call"):
                await scheduler.submit(ToolCall("t", {}), _failing_async_tool)
        except Exception as exc:
            return exc
        finally:
            await scheduler.aclose()
        raise AssertionError("the call did not fail")

    return scheduler.metrics, asyncio.run(run())


def _sync_inline(dead_letters: DeadLetterStore, tracer: Tracer) -> tuple[SchedulerMetrics, BaseException]:
    with SyncScheduler(dead_letters=dead_letters) as sync:  # no store: the letter is written inline
        try:
            with tracer.start_as_current_span("call"):
                sync.submit(ToolCall("t", {}), _failing_tool)
        except Exception as exc:
            return sync.scheduler.metrics, exc
    raise AssertionError("the call did not fail")


@pytest.mark.parametrize("path", [_async_core, _sync_inline], ids=["async", "sync"])
@pytest.mark.parametrize(
    ("error", "told"),
    [(StoreError("the store is down"), ValueError), (RuntimeError("a store driver's bug"), RuntimeError)],
    ids=["store_error", "other_error"],
)
def test_a_dead_letter_not_stored_is_counted_once_with_its_span_event_on_every_path(
    store: SQLiteStore,
    traced: tuple[Tracer, InMemorySpanExporter],
    path: Callable[[DeadLetterStore, Tracer], tuple[SchedulerMetrics, BaseException]],
    error: Exception,
    told: type[Exception],
) -> None:
    tracer, exporter = traced
    metrics, raised = path(_FailingDeadLetters(store, error), tracer)
    assert type(raised) is told  # the tool's error past a StoreError, as before R91b
    assert metrics.count("dead_letter_not_stored", "t") == 1
    [span] = exporter.get_finished_spans()
    events = [event.name for event in span.events]
    assert events.count("agentgate.task.dead_letter_not_stored") == 1, events
