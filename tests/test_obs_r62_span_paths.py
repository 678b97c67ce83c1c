"""Every span a Gate starts is ended, on every path a call takes.

The real OpenTelemetry SDK: its ``InMemorySpanExporter`` (a real exporter) and a span processor
that keeps the spans started, so that a span started and never ended shows. A traced Gate on a
real SQLite file (``test_observability.Sweep``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_observability import Sweep

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.store import SQLiteStore
from agentgate.tasks import SchedulerConfig, ToolLimits


class _Started(SpanProcessor):
    """The spans started, by id, until they end: what is left is what was never ended."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.pop(span.context.span_id, None)


class _Traced(Sweep):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.started = _Started()
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(self.started)
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.gate.tracer = provider.get_tracer("r62")

    def span(self, name: str) -> ReadableSpan:
        (found,) = [s for s in self.exporter.get_finished_spans() if s.name == name]
        return found


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[_Traced]:
    made = _Traced(tmp_path)
    yield made
    made.gate.close()


def test_allowed_refused_asked_and_failing_calls_each_end_their_span(traced: _Traced) -> None:
    """Review R62: an allowed call that succeeds, a refusal, a call that needs approval and a
    tool that raises each end the span they started, with the status their path gives."""
    gate, boss = traced.gate, traced.boss
    allowed = gate.authorize(boss, Call.tool("lookup", {"id": "1"}), call_id="a")
    assert gate.run(allowed, lambda: "found", call_id="a") == "found"
    refused = gate.authorize(boss, Call.tool("vault", {"pin": "99"}), call_id="d")
    assert not refused.allowed
    asked = gate.authorize(boss, Call.tool("transfer", {"to": "acct-7"}), call_id="t")
    assert asked.needs_approval
    raising = gate.authorize(boss, Call.tool("explode", {"password": "p"}), call_id="x")

    def explode() -> str:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        gate.run(raising, explode, call_id="x")
    gate.flush()  # a call's span ends once its outcome is written (review R69)
    assert traced.started.open == {}
    assert traced.span("execute_tool lookup").status.status_code == StatusCode.UNSET
    assert traced.span("execute_tool vault").status.status_code == StatusCode.ERROR
    assert traced.span("execute_tool transfer").status.status_code == StatusCode.UNSET
    failed = traced.span("execute_tool explode")
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "RuntimeError"


def test_a_cancelled_call_ends_its_span_as_cancelled(traced: _Traced) -> None:
    """Review R62: a call whose caller is cancelled while its tool runs ends its span, ERROR with
    ``error.type=CancelledError`` and ``agentgate.outcome=error``, as its audit outcome."""
    gate, boss = traced.gate, traced.boss

    async def cancelled() -> None:
        auth = gate.authorize(boss, Call.tool("lookup", {"id": "1"}), call_id="c")
        running = asyncio.Event()

        async def tool() -> str:
            running.set()
            await asyncio.Event().wait()
            return "never"

        task = asyncio.ensure_future(gate.arun(auth, tool, call_id="c"))
        await running.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    gate.flush()  # a call's span ends once its outcome is written (review R69)
    assert traced.started.open == {}
    span = traced.span("execute_tool lookup")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "CancelledError"
    assert span.attributes["agentgate.outcome"] == "error"


def test_a_call_cancelled_while_it_waits_for_a_slot_ends_its_span(tmp_path: Path) -> None:
    """Review R62: a call cancelled while it waits for its tool's only slot (another call holds
    it) ends its span, ERROR with ``error.type=CancelledError``, before the holder finishes."""
    traced = _Traced(tmp_path)
    traced.gate.close()
    gate = Gate(
        traced.gate.policy,
        SQLiteStore(tmp_path / "slots.db"),
        tracer=traced.gate.tracer,
        scheduler=SchedulerConfig(tools={"lookup": ToolLimits(concurrency=1)}),
    )
    boss = gate.issue(traced.keys["root"], name="boss", key=traced.keys["boss"], role="boss")

    async def one_waits() -> None:
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold() -> str:
            holding.set()
            await release.wait()
            return "held"

        async def never() -> str:
            raise AssertionError("the waiting call must not run")

        first = gate.authorize(boss, Call.tool("lookup", {"id": "1"}), call_id="h")
        second = gate.authorize(boss, Call.tool("lookup", {"id": "2"}), call_id="w")
        holder = asyncio.ensure_future(gate.arun(first, hold, call_id="h"))
        await holding.wait()
        waiter = asyncio.ensure_future(gate.arun(second, never, call_id="w"))
        for _ in range(20):  # let it reach the scheduler's queue
            await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        gate.flush()  # a call's span ends once its outcome is written (review R69)
        ended = {
            s.attributes["gen_ai.tool.call.id"]: s
            for s in traced.exporter.get_finished_spans()
            if s.attributes and "gen_ai.tool.call.id" in s.attributes
        }
        assert "w" in ended and "h" not in ended  # the waiter's ended while the holder still runs
        assert [e.name for e in ended["w"].events] == ["agentgate.task.queued"]  # it waited
        assert ended["w"].status.status_code == StatusCode.ERROR
        assert ended["w"].attributes is not None and ended["w"].attributes["error.type"] == "CancelledError"
        release.set()
        assert await holder == "held"

    try:
        asyncio.run(one_waits())
    finally:
        gate.close()
    assert traced.started.open == {}
