"""Review R62: the scheduler's ``agentgate.task.reused`` span event carried the call's idempotency
key, a SHA-256 over the tenant, principal, grant, run and call ids, tool and the arguments'
digest. The span's own attributes name most of those (the call id, the grant), so whoever reads
the traces could try every value of a small argument (a 4-digit PIN the policy does not mark
loggable) against the key and learn it. The event now says only whether the call joined a
running attempt (``agentgate.joined``), for a completed result reused and for a join alike."""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SyncScheduler, ToolCall

PIN = {"pin": "4921"}


def _reused_events(exporter: InMemorySpanExporter) -> list[dict[str, object]]:
    return [
        dict(event.attributes or {})
        for span in exporter.get_finished_spans()
        for event in span.events
        if event.name == "agentgate.task.reused"
    ]


def _traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_a_reused_result_and_a_join_carry_no_idempotency_key() -> None:
    provider, exporter = _traced()
    tracer = provider.get_tracer("r62")
    scheduler = Scheduler(SchedulerConfig())
    release = asyncio.Event()

    async def held(attempt: Attempt) -> str:
        await release.wait()
        return "opened"

    call = ToolCall("vault", PIN, run_id="run-1", call_id="call-1")
    with tracer.start_as_current_span("execute_tool vault"):
        owner = asyncio.create_task(scheduler.submit(call, held))
        await asyncio.sleep(0)
        joiner = asyncio.create_task(scheduler.submit(call, held))
        await asyncio.sleep(0)
        release.set()
        assert await owner == await joiner == "opened"
        assert await scheduler.submit(call, held) == "opened"  # the completed result, reused
    await scheduler.aclose()
    events = _reused_events(exporter)
    assert [e.get("agentgate.joined") for e in events] == [True, False]
    assert all(e.keys() == {"agentgate.tool", "agentgate.joined"} for e in events), events
    assert call.idempotency_key() not in repr(events)


def test_the_sync_facade_reuses_without_the_key_too() -> None:
    provider, exporter = _traced()
    tracer = provider.get_tracer("r62")
    scheduler = SyncScheduler(SchedulerConfig())
    call = ToolCall("vault", PIN, run_id="run-1", call_id="call-1")
    with tracer.start_as_current_span("execute_tool vault"):
        assert scheduler.submit(call, lambda attempt: "opened") == "opened"
        assert scheduler.submit(call, lambda attempt: "opened") == "opened"
    scheduler.close()
    events = _reused_events(exporter)
    assert events == [{"agentgate.tool": "vault", "agentgate.joined": False}]
