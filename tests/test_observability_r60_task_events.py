"""The scheduler's span events (``agentgate.task.*``) carry the names its caller gives within the
bound every span keeps (``agentgate._names.MAX_NAME_CHARS``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from agentgate._names import MAX_NAME_CHARS
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

LONG = 1_000_000
TOOL = "t" * LONG
TENANT = "n" * LONG


@pytest.fixture
def traced() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("r60"), exporter
    provider.shutdown()


def _event_texts(exporter: InMemorySpanExporter) -> dict[str, dict[str, object]]:
    (span,) = exporter.get_finished_spans()
    return {event.name: dict(event.attributes or {}) for event in span.events}


def test_a_sync_schedulers_events_cut_a_long_tool_name(traced: tuple[Tracer, InMemorySpanExporter]) -> None:
    """Review R60: a scheduler used alone put a 1,000,000-character tool name whole on each agentgate.task event."""
    tracer, exporter = traced
    scheduler = SyncScheduler(SchedulerConfig())
    try:
        with tracer.start_as_current_span("app"):
            assert scheduler.submit(ToolCall(tool=TOOL, tenant=TENANT), lambda _: 1) == 1
    finally:
        scheduler.close()
    events = _event_texts(exporter)
    assert events["agentgate.task.started"]["agentgate.tool"] == "t" * MAX_NAME_CHARS


def test_an_async_schedulers_queued_event_cuts_a_long_tool_and_tenant_name(
    traced: tuple[Tracer, InMemorySpanExporter],
) -> None:
    """Review R60: the queued event carried the caller's 1,000,000-character tool and tenant names whole."""
    tracer, exporter = traced

    async def both() -> None:
        scheduler = Scheduler(SchedulerConfig(default_tool=ToolLimits(concurrency=1)))
        held = asyncio.Event()

        async def first(_: Attempt) -> int:
            await held.wait()
            return 1

        async def second(_: Attempt) -> int:
            return 2

        try:
            with tracer.start_as_current_span("app"):
                running = asyncio.create_task(scheduler.submit(ToolCall(tool=TOOL, tenant=TENANT), first))
                waiting = asyncio.create_task(scheduler.submit(ToolCall(tool=TOOL, tenant=TENANT), second))
                while not scheduler.queued:  # one of the two waits for the other's slot
                    await asyncio.sleep(0)
                held.set()
                assert (await running, await waiting) == (1, 2)
        finally:
            await scheduler.aclose()

    asyncio.run(both())
    events = _event_texts(exporter)
    queued = events["agentgate.task.queued"]
    assert queued["agentgate.tool"] == "t" * MAX_NAME_CHARS
    assert queued["agentgate.tenant"] == "n" * MAX_NAME_CHARS
