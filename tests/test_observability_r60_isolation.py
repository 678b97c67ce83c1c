"""A tracer that fails changes nothing the Gate decides or writes: a span processor (or sampler)
that raises as a span starts or ends, in the caller's thread as the OpenTelemetry SDK calls it,
is logged; the decision, the tool's result and the audit entries are what they would be
untraced (``agentgate.audit.spans._started``, ``_end``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_observability import SWEEP_POLICY

from agentgate.audit.spans import execute_tool_span
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


class _Raising(SpanProcessor):
    """A span processor that raises as every span starts, or as every span ends."""

    def __init__(self, when: str) -> None:
        self.when = when

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.when == "start":
            raise RuntimeError("the processor broke at on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if self.when == "end":
            raise RuntimeError("the processor broke at on_end")


class _Traced:
    """A Gate on a SQLite file with the sweep policy, traced by a provider whose first processor
    exports to memory and whose second raises."""

    def __init__(self, path: Path, when: str) -> None:
        self.when = when
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.provider.add_span_processor(_Raising(when))
        self.keys = {n: SigningKey.generate() for n in ("root", "boss", "helper", "dana")}
        policy = parse_policy(
            SWEEP_POLICY.format(**{n: k.did for n, k in self.keys.items()}), source="s.yaml"
        )
        self.gate = Gate(policy, SQLiteStore(path / "agentgate.db"), tracer=self.provider.get_tracer("r60"))


@pytest.fixture(params=["start", "end"])
def traced(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Traced]:
    made = _Traced(tmp_path, request.param)
    yield made
    made.gate.close()
    made.provider.shutdown()


def test_a_span_processor_that_raises_changes_no_decision_result_or_entry(
    traced: _Traced, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R60: a span processor raising at on_start or on_end raised out of Gate.issue, run and authorize after or before their writes."""
    gate = traced.gate
    with caplog.at_level(logging.WARNING, logger="agentgate.audit.spans"):
        boss = gate.issue(traced.keys["root"], name="boss", key=traced.keys["boss"], role="boss")
        allowed = gate.authorize(boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
        assert allowed.allowed
        assert gate.run(allowed, lambda: "found 1", call_id="c1") == "found 1"
        again = gate.authorize(boss, Call.tool("lookup", {"id": "2"}), call_id="c2")
        assert asyncio.run(gate.arun(again, _found_2, call_id="c2")) == "found 2"
        refused = gate.authorize(boss, Call.tool("vault", {"pin": "99"}), call_id="c3")
        assert not refused.allowed and refused.audit_index is not None
        revoked = gate.revoke(boss, reason="done")
    gate.flush()
    entries = list(gate.audit.entries())
    assert [(e.kind, e.resource) for e in entries][:6] == [
        ("allow", "agent:boss"),
        ("allow", "tool:lookup"),
        ("outcome", "tool:lookup"),
        ("allow", "tool:lookup"),
        ("outcome", "tool:lookup"),
        ("deny", "tool:vault"),
    ]
    assert entries[-1].kind == "revoke"
    assert [e.status for e in entries if e.kind == "outcome"] == ["ok", "ok"]
    assert not revoked.already
    assert any("span processor raised" in r.message or "was not started" in r.message for r in caplog.records)
    if traced.when == "end":
        # The processors before the one that raised still had every span.
        names = [s.name for s in traced.exporter.get_finished_spans()]
        assert names.count("execute_tool lookup") == 2 and "execute_tool vault" in names, names


async def _found_2() -> str:
    return "found 2"


class _RaisingFor(SpanProcessor):
    """A span processor that raises as a span of one name starts."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if span.name == self.name:
            raise RuntimeError(f"the processor broke at {self.name}")


def test_a_span_that_could_not_start_leaves_the_spans_inside_it_in_their_trace() -> None:
    """Review R60: a tool span whose start raised ended the call; made current as an invalid span, the tool's own spans would start traces of their own."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(_RaisingFor("execute_tool search"))
    tracer = provider.get_tracer("r60")
    with tracer.start_as_current_span("run") as run, execute_tool_span("search", tracer=tracer) as tool:
        assert not tool.is_recording()
        with tracer.start_as_current_span("inside the tool"):
            pass
    inside = next(s for s in exporter.get_finished_spans() if s.name == "inside the tool")
    assert inside.parent is not None and inside.parent.span_id == run.get_span_context().span_id
    assert inside.context.trace_id == run.get_span_context().trace_id
    provider.shutdown()
