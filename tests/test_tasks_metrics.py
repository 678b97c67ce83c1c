"""Every scheduling event is visible: span events on the caller's span, Prometheus metrics."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

from agentgate.errors import Overloaded
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)


class Transient(Exception):
    error_class = "transient"


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_events_are_span_events_and_metrics(spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    policy = RetryPolicy(attempts=2, backoff_initial_s=0.001, retry_on=("transient",))
    config = SchedulerConfig(
        max_concurrency=1,
        max_queued=1,
        tools={"t": ToolLimits(retry=policy)},
        breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=60),
    )
    scheduler = Scheduler(config)
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    async def failing(attempt: Attempt) -> None:
        raise Transient("flaky")

    with tracer.start_as_current_span("execute_tool t"):
        holder = asyncio.create_task(scheduler.submit(ToolCall("t"), hold))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(scheduler.submit(ToolCall("t"), failing))
        await asyncio.sleep(0)
        assert scheduler.registry.get_sample_value("agentgate_tasks_queue_depth", {"tenant": "default"}) == 1
        assert scheduler.registry.get_sample_value("agentgate_tasks_in_flight", {"tool": "t"}) == 1
        with pytest.raises(Overloaded):
            await scheduler.submit(ToolCall("t"), hold)
        gate.set()
        await holder
        with pytest.raises(Transient):
            await waiting
    [span] = exporter.get_finished_spans()
    names = [event.name for event in span.events]
    for expected in ("queued", "started", "shed", "retried", "gave_up", "breaker_opened"):
        assert f"agentgate.task.{expected}" in names, names
    retried = next(e for e in span.events if e.name == "agentgate.task.retried")
    assert retried.attributes is not None and retried.attributes["agentgate.error_class"] == "transient"
    text = generate_latest(scheduler.registry).decode()
    assert 'agentgate_tasks_events_total{event="retried",tool="t"} 1.0' in text
    assert 'agentgate_tasks_events_total{event="shed",tool="t"} 1.0' in text
    assert 'agentgate_tasks_breaker_state{key="tool:t"} 2.0' in text
    assert (
        scheduler.registry.get_sample_value("agentgate_tasks_wait_seconds_count") == 3
    )  # two calls, one retry
    await scheduler.aclose()


def test_sync_facade_adds_events_to_the_callers_span(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    with SyncScheduler() as scheduler, provider.get_tracer("test").start_as_current_span("execute_tool x"):
        assert scheduler.submit(ToolCall("x"), lambda attempt: 7) == 7
    [span] = exporter.get_finished_spans()
    assert [e.name for e in span.events] == ["agentgate.task.started"]


def test_each_scheduler_has_its_own_registry() -> None:
    first, second = Scheduler(), Scheduler()
    assert first.registry is not second.registry
