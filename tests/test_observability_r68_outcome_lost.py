"""Review R68: a call's span and the audit log disagreed when the call's ``outcome`` entry could
not be written: the span said ``agentgate.outcome=ok`` (status UNSET) and nothing in the trace
said that the log has no outcome for the call. (R68 added an ``outcome_lost`` child span; since
review R70 the call's own span says it, as it does since R69, and the child is gone.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
from _raw_sqlite import opened
from opentelemetry.sdk.trace import ReadableSpan
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
    with opened(path / "agentgate.db") as db:
        db.executescript(REFUSE_OUTCOMES)


def _lost_spans(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get("agentgate.outcome.lost") is True]


def test_an_outcome_the_store_refused_is_said_on_the_calls_span(sweep: Sweep, tmp_path: Path) -> None:
    """Review R68: the store refused the call's ``outcome`` entry (a trigger; logged 'not
    recorded'), yet the only span of the call said ``agentgate.outcome=ok``, UNSET, and the trace
    had nothing saying the log holds no outcome. Since review R70 the call's span alone says so
    (R68 made an ``outcome_lost`` child span for it): ERROR with the store's error type,
    ``agentgate.outcome.lost``, the decision's entry, and no ``agentgate.outcome``."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.flush()
    spans = sweep.exporter.get_finished_spans()
    assert [s.name for s in _lost_spans(spans)] == ["execute_tool lookup"], [s.name for s in spans]
    (span,) = _lost_spans(spans)
    assert span.status.status_code == StatusCode.ERROR
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "AuditError"
    assert attributes["agentgate.audit.index"] == auth.audit_index
    assert "agentgate.outcome" not in attributes
    assert "outcomes refused" not in span.to_json()  # the store's message is not exported


def test_an_outcome_written_has_no_lost_span(sweep: Sweep) -> None:
    """Review R68: only an outcome that could not be written is said lost."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.flush()
    assert _lost_spans(sweep.exporter.get_finished_spans()) == []


def test_a_refused_outcome_carried_by_the_next_decision_is_said_on_its_own_calls_span(
    sweep: Sweep, tmp_path: Path
) -> None:
    """Review R68: an outcome the next decision's transaction carries and the store refuses is
    said lost on its own call's span, not on the next decision's."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "2"}), call_id="c2")
    sweep.gate.flush()
    lost = _lost_spans(sweep.exporter.get_finished_spans())
    assert [(s.attributes or {}).get("gen_ai.tool.call.id") for s in lost] == ["c1"]


def test_an_abandoned_calls_refused_outcome_is_said_on_its_span_too(sweep: Sweep, tmp_path: Path) -> None:
    """Review R68: an allow given up before it ran (``Gate.abandon``) had its outcome settled
    before its span was made, so an outcome the store then refused was said nowhere. Its span
    says it, keeping the call's own ``error.type``."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.abandon(auth)
    sweep.gate.flush()
    (call,) = _lost_spans(sweep.exporter.get_finished_spans())
    assert call.name == "execute_tool lookup"
    assert call.attributes is not None and call.attributes["error.type"] == "CancelledError"


def test_a_gateway_streams_refused_outcome_is_said_on_the_chat_span(tmp_path: Path) -> None:
    """Review R68: the gateway's streamed call settles its outcome as the Gate's run does; an
    outcome the store refused is said lost on the call's ``chat`` span."""
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
        assert [s.name for s in _lost_spans(exporter.get_finished_spans())] == ["chat m"]
