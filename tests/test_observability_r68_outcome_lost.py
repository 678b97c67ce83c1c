"""Review R68: a call's span and the audit log disagreed when the call's ``outcome`` entry could
not be written: the span said ``agentgate.outcome=ok`` (status UNSET) and nothing in the trace
said that the log has no outcome for the call."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from opentelemetry.trace import StatusCode
from test_observability import Sweep

from agentgate.capabilities import Call

REFUSE_OUTCOMES = """
CREATE TRIGGER refuse_outcomes BEFORE INSERT ON audit_log
WHEN instr(CAST(NEW.entry AS TEXT), '"kind":"outcome"') > 0
BEGIN SELECT RAISE(ABORT, 'outcomes refused'); END
"""


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    made = Sweep(tmp_path)
    yield made
    made.gate.close()


def _refuse_outcomes(path: Path) -> None:
    with sqlite3.connect(path / "agentgate.db") as db:
        db.executescript(REFUSE_OUTCOMES)


def test_an_outcome_the_store_refused_has_an_error_span_under_the_calls_span(
    sweep: Sweep, tmp_path: Path
) -> None:
    """Review R68: the store refused the call's ``outcome`` entry (a trigger; logged 'not
    recorded'), yet the only span of the call said ``agentgate.outcome=ok``, UNSET, and the trace
    had nothing saying the log holds no outcome: it now has ``outcome_lost tool:lookup``, a
    child of the call's span, ERROR with the store's error type, ``agentgate.outcome.lost`` and
    the decision's entry as ``agentgate.audit.ref``, and no ``agentgate.outcome``."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.flush()
    spans = sweep.exporter.get_finished_spans()
    (call,) = [s for s in spans if s.name == "execute_tool lookup"]
    lost = [s for s in spans if s.name == "outcome_lost tool:lookup"]
    assert len(lost) == 1, [s.name for s in spans]
    (span,) = lost
    assert span.parent is not None and span.parent.span_id == call.context.span_id
    assert span.context.trace_id == call.context.trace_id
    assert span.status.status_code == StatusCode.ERROR
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "AuditError"
    assert attributes["agentgate.outcome.lost"] is True
    assert attributes["agentgate.audit.ref"] == auth.audit_index
    assert attributes["agentgate.resource"] == "tool:lookup"
    assert "agentgate.outcome" not in attributes
    assert "outcomes refused" not in span.to_json()  # the store's message is not exported


def test_an_outcome_written_has_no_lost_span(sweep: Sweep) -> None:
    """Review R68: the span of an outcome that could not be written is only made for such a one."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.flush()
    names = [s.name for s in sweep.exporter.get_finished_spans()]
    assert not [n for n in names if n.startswith("outcome_lost")], names


def test_a_refused_outcome_carried_by_the_next_decision_has_its_span_after_that_commit(
    sweep: Sweep, tmp_path: Path
) -> None:
    """Review R68: an outcome the next decision's transaction carries and the store refuses has
    its ``outcome_lost`` span under the call's span, not under the next decision's."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "2"}), call_id="c2")
    sweep.gate.flush()
    spans = sweep.exporter.get_finished_spans()
    call = next(s for s in spans if s.attributes and s.attributes.get("gen_ai.tool.call.id") == "c1")
    lost = [s for s in spans if s.name == "outcome_lost tool:lookup"]
    assert [s.parent.span_id for s in lost if s.parent] == [call.context.span_id]


def test_an_abandoned_calls_refused_outcome_has_its_span_too(sweep: Sweep, tmp_path: Path) -> None:
    """Review R68: an allow given up before it ran (``Gate.abandon``) had its outcome settled
    before its span was made, so an outcome the store then refused had no ``outcome_lost`` span."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.abandon(auth)
    sweep.gate.flush()
    spans = sweep.exporter.get_finished_spans()
    (call,) = [s for s in spans if s.name == "execute_tool lookup"]
    assert call.attributes is not None and call.attributes["error.type"] == "CancelledError"
    lost = [s for s in spans if s.name == "outcome_lost tool:lookup"]
    assert [s.parent.span_id for s in lost if s.parent] == [call.context.span_id]


def test_a_gateway_streams_refused_outcome_has_its_span_under_the_chat_span(tmp_path: Path) -> None:
    """Review R68: the gateway's streamed call settles its outcome as the Gate's run does; an
    outcome the store refused has its ``outcome_lost`` span under the call's ``chat`` span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from test_gateway_authority import chat_allowed

    from agentgate.dispatch import ChatChunk

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with chat_allowed(tmp_path / "agentgate.db", provider.get_tracer("r68")) as (gate, auth):
        _refuse_outcomes(tmp_path)

        async def backend() -> AsyncIterator[ChatChunk]:
            yield ChatChunk("hi", finish_reason="stop")

        async def read() -> None:
            async for _ in gate.gated_stream(auth, backend()):
                pass

        asyncio.run(read())
        gate.flush()
        spans = exporter.get_finished_spans()
        (chat,) = [s for s in spans if s.name == "chat m"]
        lost = [s for s in spans if s.name == "outcome_lost model:m"]
        assert [s.parent.span_id for s in lost if s.parent] == [chat.context.span_id]
