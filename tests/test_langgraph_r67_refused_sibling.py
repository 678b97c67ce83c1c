"""Parallel tool calls in one answer under ``enforce=True`` and ``ainvoke``: one call is refused
(``Denied`` ends the run) while a sync tool's call beside it has just been allowed. LangGraph
cancels the sibling's task, and the loop's shutdown cancels what is left; the allowed call was
left with no outcome and its reservation held, even after ``Gate.close``: the wait for its
decision's end was cut by the second cancellation (``GateMiddleware._decided``), and a call whose
run's own task was cancelled before its first step was never settled (``_ThreadedCall.outcome``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import StructuredTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from test_langgraph import _calls, _entries, _make_team, _tools

from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.integrations.langgraph._calls import _ThreadedCall

GO = {"messages": [{"role": "user", "content": "go"}]}
RUNS = 8
"""How many runs: where the cancellation lands is up to the event loop; before the fix most runs
(three in four here) left the allowed call unsettled."""


def _search(query: str) -> str:
    time.sleep(0.05)
    return f"results for {query}"


@pytest.mark.parametrize("run", range(RUNS))
def test_an_allowed_sync_tool_call_beside_a_refused_one_is_settled_when_the_run_ends(
    tmp_path: Path, run: int
) -> None:
    """Review R67: the allowed call's ``Gate.arun`` ran in a task of its own
    (``_ThreadedCall.outcome``), which a cancellation before its first step never runs: no
    outcome was written and no reservation released for the allow already recorded."""
    team = _make_team(tmp_path, budget=5, unit="calls")
    search = StructuredTool.from_function(func=_search, name="search", description="search")
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("shell", {"cmd": "x"}), ("search", {"query": "a"}))]),
        tools=[search, _tools(team)[2]],
        enforce=True,
        gate_models=False,
    )
    try:
        with pytest.raises(Denied):
            asyncio.run(agent.ainvoke(GO, context=team.supervisor))
        entries = _entries(team.gate)
        allowed = [e.index for e in entries if e.kind == "allow" and e.resource == "tool:search"]
        settled = [e.ref for e in entries if e.kind == "outcome" and e.resource == "tool:search"]
        assert settled == allowed
        states = team.gate.store.query("SELECT state FROM budget_reservations")
        assert [state for (state,) in states if state == "reserved"] == []
    finally:
        team.gate.close()


async def test_a_threaded_call_cancelled_before_its_run_began_is_settled_as_not_run(tmp_path: Path) -> None:
    """Review R67: a sync tool's call under ``ainvoke`` runs ``Gate.arun`` in a task of its own
    (``_ThreadedCall.outcome``). The loop's shutdown cancels every task at once: that task,
    cancelled before its first step, never ran, so ``Gate.arun`` never saw the allow, which was
    left with no outcome and its reservation held. Here the shutdown's cancellation is made as
    ``asyncio.run`` makes it, right after the call handed its run to that task."""
    team = _make_team(tmp_path, budget=5, unit="calls")
    search = StructuredTool.from_function(func=_search, name="search", description="search")
    call = {"name": "search", "args": {"query": "a"}, "id": "c1", "type": "tool_call"}
    request = ToolCallRequest(tool_call=call, tool=search, state={}, runtime=None)  # type: ignore[arg-type, typeddict-item]
    try:
        auth = team.gate.authorize(team.supervisor, Call.tool("search", {"query": "a"}), agent="supervisor")
        assert auth.allowed
        threaded = _ThreadedCall(request, search)

        async def attempt() -> Any:
            return await threaded.attempt(lambda req: search.ainvoke(req.tool_call))

        running = team.gate.arun(auth, attempt, call_id="c1", preemptible=False)
        waiting = asyncio.ensure_future(threaded.outcome(running, lambda: team.gate.abandon(auth)))
        await asyncio.sleep(0)  # ``outcome`` handed ``running`` to its task, which has not begun
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        entries = _entries(team.gate)
        (outcome,) = [e for e in entries if e.kind == "outcome"]
        assert outcome.ref == auth.audit_index and outcome.status == "error"
        assert outcome.reasons == ("CancelledError: given up before the call started",)
        states = team.gate.store.query("SELECT state FROM budget_reservations")
        assert [state for (state,) in states] == ["released"]
    finally:
        team.gate.close()
