"""Review R90: ``Gate.run``/``arun`` took any ``call_id`` and ``run_id``, even ones that
contradict the call it was decided for. A refund approved for call ``A`` ran as call ``B``: its
span said that call ``B`` was approved and ran (``gen_ai.tool.call.id``, the allow's audit
index), and the scheduler keyed its idempotency on ``B``. An id the decision has is now the
call's: another one is refused with ``InputError`` before anything runs, the allow left unused,
and a call id left out at the run is the decided one on its span (not in its idempotency key:
tests/test_evidence_r90b_callid_at_authorize.py).

Real components: a Gate on a SQLite file (``test_gate``'s policy: a refund over 100 needs the
lead's approval, bound to its call id) with an in-memory span exporter."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.errors import Denied, InputError
from agentgate.gate import Approval, Authorization

REFUND = Call.tool("refund", {"amount": 500})


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Setup, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = Setup(tmp_path, tracer=provider.get_tracer("r90"))
    yield made, exporter
    made.gate.close()


def _approved(setup: Setup) -> Authorization:
    """The refund's allow, approved by the lead for call ``A`` of run ``R``."""
    asked = setup.gate.authorize(setup.agent, REFUND, call_id="A", run_id="R")
    assert asked.needs_approval
    approval = Approval.parse(setup.gate.approve(asked.approval_payload(), setup.keys["lead"]))
    allowed = setup.gate.authorize(setup.agent, REFUND, call_id="A", run_id="R", approval=approval)
    assert allowed.allowed
    return allowed


def _tool_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The spans of allowed tool calls (the request's asking has one too, not an allow's)."""
    return [
        span
        for span in exporter.get_finished_spans()
        if span.name.startswith("execute_tool")
        and (span.attributes or {}).get("agentgate.decision") == "allow"
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("ids", [{"call_id": "B"}, {"run_id": "other-run"}], ids=["call_id", "run_id"])
def test_a_run_under_ids_other_than_the_decided_ones_is_refused_and_runs_nothing(
    traced: tuple[Setup, InMemorySpanExporter], mode: str, ids: dict[str, str]
) -> None:
    setup, exporter = traced
    allowed = _approved(setup)
    ran: list[str] = []

    def refund() -> str:
        ran.append("refunded")
        return "refunded"

    async def arefund() -> str:
        return refund()

    def run(**given: str) -> str:
        if mode == "sync":
            return setup.gate.run(allowed, refund, **given)
        return asyncio.run(setup.gate.arun(allowed, arefund, **given))

    (name,) = ids
    with pytest.raises(InputError, match=f"{name} '{ids[name]}' is not the one the allow of tool:refund"):
        run(**ids)
    assert ran == [] and _tool_spans(exporter) == []
    # The allow is left unused: the decided call runs once, and its span names it.
    assert run(call_id="A", run_id="R") == "refunded"
    assert ran == ["refunded"]
    setup.gate.flush()
    (span,) = _tool_spans(exporter)
    assert span.attributes is not None
    assert span.attributes["gen_ai.tool.call.id"] == "A"
    assert span.attributes["agentgate.audit.index"] == allowed.audit_index


def test_a_run_that_names_no_ids_runs_and_traces_the_decided_call(
    traced: tuple[Setup, InMemorySpanExporter],
) -> None:
    setup, exporter = traced
    allowed = _approved(setup)
    assert setup.gate.run(allowed, lambda: "refunded") == "refunded"
    setup.gate.flush()
    (span,) = _tool_spans(exporter)
    assert span.attributes is not None and span.attributes["gen_ai.tool.call.id"] == "A"


def test_an_allow_copied_with_another_call_id_is_not_run(traced: tuple[Setup, InMemorySpanExporter]) -> None:
    setup, _ = traced
    copied = dataclasses.replace(_approved(setup), call_id="B")
    with pytest.raises(Denied, match="not decided by this Gate"):
        setup.gate.run(copied, lambda: "refunded", call_id="B")
