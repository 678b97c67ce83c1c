"""Review R90: a tool call that the scheduler served with the result of another call with the
same idempotency key (completed earlier, or running beside it) was recorded as a plain ``ok``
outcome: the tool did not run, yet the signed log read as if it had; only the span's
``agentgate.task.reused`` event said otherwise. Every replay is still decided and charged
(docs/langgraph.md, Time travel), and its ``outcome`` entry now says the result was reused.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call

LOOKUP = Call.tool("lookup", {"id": "42"})
REUSED = "result reused: the tool did not run for this call"
IDS = {"call_id": "c1", "run_id": "r1"}
"""The ids each call is decided and run with (as the LangGraph middleware gives both): those given
to ``Gate.run`` make its idempotency key (tests/test_evidence_r90b_callid_at_authorize.py)."""


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _outcomes(setup: Setup) -> list[AuditEntry]:
    return [entry for entry in setup.entries() if entry.kind == "outcome"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_outcome_served_from_a_completed_result_says_it_was_reused_and_is_charged(
    setup: Setup, mode: str
) -> None:
    ran: list[str] = []

    def lookup() -> str:
        ran.append("ran")
        return f"found #{len(ran)}"

    async def alookup() -> str:
        return lookup()

    async def three_async_runs() -> list[str]:  # one event loop: one scheduler, one result cache
        return [
            await setup.gate.arun(
                setup.gate.authorize(setup.agent, LOOKUP, call_id="c1", run_id="r1"), alookup, **IDS
            )
            for _ in range(3)
        ]

    if mode == "sync":
        got = [
            setup.gate.run(setup.gate.authorize(setup.agent, LOOKUP, **IDS), lookup, **IDS) for _ in range(3)
        ]
    else:
        got = asyncio.run(three_async_runs())
    assert got == ["found #1"] * 3
    assert ran == ["ran"]
    first, *replays = _outcomes(setup)
    assert first.status == "ok" and not any(r.startswith("result reused") for r in first.reasons)
    assert len(replays) == 2
    for replay in replays:
        assert replay.status == "ok"
        assert any(r.startswith(REUSED) for r in replay.reasons), replay.reasons
        assert replay.charges == first.charges  # decided and charged as the run was
    assert setup.gate.verify().ok


def test_an_outcome_that_joined_a_running_twin_says_it_was_reused(setup: Setup) -> None:
    """The second call joins the first while its tool runs: one run, two outcomes, and the
    joiner's says the result was reused."""
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def lookup() -> str:
        ran.append("ran")
        entered.set()
        assert release.wait(5)
        return "found"

    first = setup.gate.authorize(setup.agent, LOOKUP, call_id="c1", run_id="r1")
    results: list[str] = []
    running = threading.Thread(target=lambda: results.append(setup.gate.run(first, lookup, **IDS)))
    running.start()
    assert entered.wait(5)
    joiner = setup.gate.authorize(setup.agent, LOOKUP, call_id="c1", run_id="r1")
    joined = threading.Thread(target=lambda: results.append(setup.gate.run(joiner, lookup, **IDS)))
    joined.start()
    # The joiner waits on its twin (its own tool never entered) before the twin is released.
    metrics = setup.gate._sync().scheduler.metrics
    for _ in range(1000):
        if metrics.count("reused", "lookup"):
            break
        time.sleep(0.002)
    assert metrics.count("reused", "lookup") == 1 and not results
    release.set()
    running.join(5)
    joined.join(5)
    assert results == ["found", "found"] and ran == ["ran"]
    by_ref = {entry.ref: entry for entry in _outcomes(setup)}
    assert not any(r.startswith("result reused") for r in by_ref[first.audit_index].reasons)
    assert any(r.startswith(REUSED) for r in by_ref[joiner.audit_index].reasons)
