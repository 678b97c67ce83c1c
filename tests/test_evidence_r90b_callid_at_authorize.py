"""A call id given to ``Gate.authorize`` alone names the call's span, not its idempotency key.

Review R90 made ``Gate.run``/``arun`` take an id left out as the one the call was decided with,
for its span and for the scheduler's idempotency key alike. A tool call decided with
``call_id="job-1"`` and run without ids, which before had no key and ran its tool each time, was
then keyed: every later decision of it with the same arguments (scope: the grant) was served the
first call's result, its tool not run and the call charged all the same. The idempotency key is
made of the ids given to ``run``/``arun`` again; the decided call id still names the span, and
an id that contradicts the decided one is still refused (tests/test_evidence_r90_run_ids.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.gate import Authorization
from agentgate.gate._outcomes import RESULT_REUSED

LOOKUP = Call.tool("lookup", {"id": "42"})


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Setup, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = Setup(tmp_path, tracer=provider.get_tracer("r90b"))
    yield made, exporter
    made.gate.close()


def _three_runs(setup: Setup, mode: str, **at_run: str) -> tuple[list[str], list[int]]:
    """Three decisions of the same lookup under ``call_id="job-1"``, each run with ``at_run``:
    what each run returned, and the tool's runs."""
    ran: list[int] = []

    def lookup() -> str:
        ran.append(1)
        return f"found #{len(ran)}"

    async def alookup() -> str:
        return lookup()

    def decided() -> Authorization:
        return setup.gate.authorize(setup.agent, LOOKUP, call_id="job-1")

    async def arun_all() -> list[str]:  # one loop: its scheduler keeps the results
        return [await setup.gate.arun(decided(), alookup, **at_run) for _ in range(3)]

    if mode == "sync":
        return [setup.gate.run(decided(), lookup, **at_run) for _ in range(3)], ran
    return asyncio.run(arun_all()), ran


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_without_ids_runs_the_tool_each_time(
    traced: tuple[Setup, InMemorySpanExporter], mode: str
) -> None:
    setup, exporter = traced
    got, ran = _three_runs(setup, mode)
    assert got == ["found #1", "found #2", "found #3"] and len(ran) == 3
    outcomes = [e for e in setup.entries() if e.kind == "outcome"]
    assert [e.status for e in outcomes] == ["ok"] * 3
    assert not any(RESULT_REUSED in reason for e in outcomes for reason in e.reasons)
    # The span still names the call the allow was decided for.
    spans = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert [(s.attributes or {}).get("gen_ai.tool.call.id") for s in spans] == ["job-1"] * 3


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_id_given_at_the_run_keys_the_call(
    traced: tuple[Setup, InMemorySpanExporter], mode: str
) -> None:
    setup, _ = traced
    got, ran = _three_runs(setup, mode, call_id="job-1")
    assert got == ["found #1"] * 3 and len(ran) == 1
