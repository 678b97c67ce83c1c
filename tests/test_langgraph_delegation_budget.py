"""Sub-agent delegation in the LangGraph integration, as a team building an agent tree uses it
(review round 37, area ``delegation``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_langgraph import _ask_researcher, _calls, _make_team, _tools

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_supervisor_whose_budget_its_sub_agents_spent_stops_delegating(tmp_path: Path, mode: str) -> None:
    """docs/langgraph.md (Budgets): an exhausted budget ends the run at the model's next turn, also
    with ``gate_models=False``. A supervisor that only delegates was asked again and again: each
    delegation made a fresh grant, whose sub-agent was refused its first call by the supervisor's
    spent budget, and the supervisor went on delegating (eight grants, eight refused sub-agents).
    Once a sub-agent could pay for nothing, no later delegation can: the run ends there."""
    team = _make_team(tmp_path, budget=300)
    try:
        searches = [_calls(("search", {"query": f"q{i}"})) for i in range(30)]
        researcher = create_gated_agent(
            team.gate,
            name="researcher",
            model=ScriptedChatModel(turns=searches),
            tools=_tools(team),
            max_tokens=20,
        )
        asks = [_calls(("ask_researcher", {"task": f"t{i}"})) for i in range(8)]
        supervisor = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=asks),
            tools=[_ask_researcher(team, agent=researcher, budget=200)],
            gate_models=False,
        )
        config: dict[str, Any] = {"recursion_limit": 400}
        if mode == "sync":
            result = supervisor.invoke(GO, context=team.supervisor, config=config)
        else:
            result = asyncio.run(supervisor.ainvoke(GO, context=team.supervisor, config=config))

        spent = [team.gate.budget_usage(child)[child.grant_id][0] for _, child in team.gate.delegations]
        assert len(spent) < len(asks)
        assert spent[-1] == 0 and all(s > 0 for s in spent[:-1])  # none after one that paid for nothing
        last = result["messages"][-1]
        assert last.type == "ai" and not last.tool_calls and "budget exhausted" in str(last.content)
        root_spent, limit = team.gate.budget_usage(team.supervisor)[team.supervisor.chain.root.id]
        assert root_spent <= limit == 300
    finally:
        team.gate.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_supervisor_stops_delegating_to_a_sub_agent_whose_model_call_no_grant_can_hold(
    tmp_path: Path, mode: str
) -> None:
    """Review R82: a model call that costs more than its grant's whole budget is refused as
    never fitting (``budget_never_fits``), not as a spent budget; it still ends the supervisor's
    run when the sub-agent paid for nothing, since every later delegation hands on a grant just
    like it (the split first left this out, and the supervisor delegated again and again)."""
    team = _make_team(tmp_path, budget=300)
    try:
        researcher = create_gated_agent(
            team.gate,
            name="researcher",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))] * 4),
            tools=_tools(team),
            max_tokens=100_000,
        )
        asks = [_calls(("ask_researcher", {"task": f"t{i}"})) for i in range(4)]
        supervisor = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=asks),
            tools=[_ask_researcher(team, agent=researcher, budget=50)],
            gate_models=False,
        )
        if mode == "sync":
            result = supervisor.invoke(GO, context=team.supervisor)
        else:
            result = asyncio.run(supervisor.ainvoke(GO, context=team.supervisor))
        assert len(team.gate.delegations) == 1, team.gate.delegations
        last = result["messages"][-1]
        assert last.type == "ai" and not last.tool_calls and "more than the whole budget" in str(last.content)
    finally:
        team.gate.close()
