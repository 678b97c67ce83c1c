"""Review R69: a call's span said ``agentgate.outcome=ok`` (status UNSET) before its ``outcome``
entry was written; when the store then refused it the span still said ``ok`` and only an
``outcome_lost`` child span said otherwise. A call's span now ends once its outcome's fate is
known: with ``agentgate.outcome`` when the entry is written, else ERROR with
``agentgate.outcome.lost=true`` and no ``agentgate.outcome``; the same rule for tool calls, model
calls, async runs and the gateway's streamed calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _raw_sqlite import opened
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from test_observability import Sweep
from test_observability_r68_outcome_lost import _refuse_outcomes
from test_observability_r68_outcome_lost import sweep as sweep  # the fixture the tests take

from agentgate.capabilities import Call


def _outcomes(path: Path) -> list[str]:
    with opened(path / "agentgate.db") as db:
        rows = db.execute("SELECT CAST(entry AS TEXT) FROM audit_log").fetchall()
    return [row[0] for row in rows if '"kind":"outcome"' in row[0]]


def _call_span(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def _assert_lost(span: ReadableSpan) -> None:
    attributes = dict(span.attributes or {})
    assert "agentgate.outcome" not in attributes, attributes
    assert attributes["agentgate.outcome.lost"] is True
    assert span.status.status_code == StatusCode.ERROR


def test_a_tool_calls_span_says_ok_only_once_its_outcome_is_written(sweep: Sweep, tmp_path: Path) -> None:
    """Review R69: the store refused the call's outcome (a trigger), yet the call's span said
    ``agentgate.outcome=ok``, UNSET: it now says the outcome is lost, ERROR, and no outcome."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    assert sweep.gate.run(auth, lambda: "found", call_id="c1") == "found"
    sweep.gate.flush()
    assert _outcomes(tmp_path) == []
    span = _call_span(sweep.exporter.get_finished_spans(), "execute_tool lookup")
    _assert_lost(span)
    assert dict(span.attributes or {})["error.type"] == "AuditError"


def test_a_written_outcome_is_on_the_calls_span(sweep: Sweep, tmp_path: Path) -> None:
    """Review R69: an outcome the store wrote is on the call's span, as the log has it."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.flush()
    assert len(_outcomes(tmp_path)) == 1 and '"status":"ok"' in _outcomes(tmp_path)[0]
    span = _call_span(sweep.exporter.get_finished_spans(), "execute_tool lookup")
    attributes = dict(span.attributes or {})
    assert attributes["agentgate.outcome"] == "ok" and "agentgate.outcome.lost" not in attributes
    assert span.status.status_code == StatusCode.UNSET


def test_a_model_calls_span_says_its_outcome_is_lost(sweep: Sweep, tmp_path: Path) -> None:
    """Review R69: the same for a model call (the dispatcher's and LangGraph's ``chat`` span)."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.model("scripted", {}), tokens=(10, 10))
    assert auth.allowed
    sweep.gate.run(auth, lambda: "answer")
    sweep.gate.flush()
    _assert_lost(_call_span(sweep.exporter.get_finished_spans(), "chat scripted"))


def test_a_failed_async_calls_span_says_its_outcome_is_lost(sweep: Sweep, tmp_path: Path) -> None:
    """Review R69: an ``arun`` (LangGraph's tool node) whose call failed keeps its error type,
    and says its ``error`` outcome was not written instead of claiming it."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")

    async def tool() -> str:
        raise ValueError("no")

    with pytest.raises(ValueError):
        asyncio.run(sweep.gate.arun(auth, tool, call_id="c1"))
    sweep.gate.flush()
    span = _call_span(sweep.exporter.get_finished_spans(), "execute_tool lookup")
    _assert_lost(span)
    assert dict(span.attributes or {})["error.type"] == "ValueError"


def test_a_call_cancelled_mid_call_has_one_span_ended_once(sweep: Sweep, tmp_path: Path) -> None:
    """Review R69: a call cancelled while it runs has exactly one span, ended, with the outcome
    the log records."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")

    async def main() -> None:
        started = asyncio.Event()

        async def tool() -> str:
            started.set()
            await asyncio.Event().wait()
            return "never"

        task = asyncio.create_task(sweep.gate.arun(auth, tool, call_id="c1"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    sweep.gate.flush()
    spans = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert len(spans) == 1
    attributes = dict(spans[0].attributes or {})
    assert attributes["agentgate.outcome"] == "error" and attributes["error.type"] == "CancelledError"
    assert '"status":"error"' in _outcomes(tmp_path)[0]


def test_a_gateway_streams_span_says_its_outcome_is_lost(tmp_path: Path) -> None:
    """Review R69: the gateway's streamed call follows the same rule on its ``chat`` span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from test_gateway_authority import chat_allowed

    from agentgate.dispatch import ChatChunk

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with chat_allowed(tmp_path / "agentgate.db", provider.get_tracer("r69")) as (gate, auth):
        _refuse_outcomes(tmp_path)

        async def backend() -> AsyncIterator[ChatChunk]:
            yield ChatChunk("hi", finish_reason="stop")

        async def read() -> None:
            async for _ in gate.gated_stream(auth, backend()):
                pass

        asyncio.run(read())
        gate.flush()
        _assert_lost(_call_span(exporter.get_finished_spans(), "chat m"))


def test_a_gateway_stream_cancelled_mid_call_ends_its_span_once(tmp_path: Path) -> None:
    """Review R69: a streamed call whose reader is cancelled mid-stream ends its ``chat`` span
    exactly once, with the ``error`` outcome the log records."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from test_gateway_authority import chat_allowed

    from agentgate.dispatch import ChatChunk

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with chat_allowed(tmp_path / "agentgate.db", provider.get_tracer("r69")) as (gate, auth):

        async def backend() -> AsyncIterator[ChatChunk]:
            yield ChatChunk("hi")
            await asyncio.Event().wait()
            yield ChatChunk("never", finish_reason="stop")

        async def read() -> None:
            got = asyncio.Event()

            async def consume() -> None:
                async for _ in gate.gated_stream(auth, backend()):
                    got.set()

            task = asyncio.create_task(consume())
            await got.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(read())
        gate.flush()
        spans = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
        assert len(spans) == 1
        attributes = dict(spans[0].attributes or {})
        assert attributes["agentgate.outcome"] == "error" and "agentgate.outcome.lost" not in attributes
        assert spans[0].status.status_code == StatusCode.ERROR
        assert '"status":"error"' in _outcomes(tmp_path)[-1]


REFUSE_SETTLEMENTS = """
CREATE TRIGGER refuse_settle BEFORE UPDATE ON budget_reservations
BEGIN SELECT RAISE(ABORT, 'no settlement'); END;
CREATE TRIGGER refuse_release BEFORE DELETE ON budget_reservations
BEGIN SELECT RAISE(ABORT, 'no settlement'); END;
"""


def test_an_outcome_retried_until_the_gate_closed_says_so_on_the_calls_span(tmp_path: Path) -> None:
    """Review R69: an outcome the store kept refusing (its budget row locked by a trigger: tried
    again, not dropped) and still unwritten when the gate closed (logged 'not recorded: the store
    failed as the gate closed') left the call's span saying ``agentgate.outcome=ok``, and no
    span said otherwise. The span now waits while the outcome is retried and ends lost."""
    sweep = Sweep(tmp_path)
    with opened(tmp_path / "agentgate.db") as db:
        db.executescript(REFUSE_SETTLEMENTS)
    auth = sweep.gate.authorize(sweep.boss, Call.model("scripted", {}), tokens=(10, 10))
    assert auth.allowed and auth.reservations
    sweep.gate.run(auth, lambda: "answer")
    sweep.gate.flush()  # refused, kept to be tried again: its fate is not known yet
    assert not [s for s in sweep.exporter.get_finished_spans() if s.name == "chat scripted"]
    sweep.gate.close()
    assert _outcomes(tmp_path) == []
    span = _call_span(sweep.exporter.get_finished_spans(), "chat scripted")
    _assert_lost(span)
    assert dict(span.attributes or {})["error.type"] == "agentgate.outcome_lost"
