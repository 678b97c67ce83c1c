"""An answer of many valid tool calls: the policy bounds what runs by each call's decision (grant,
tool ``rate``, quotas, budget), never by how many calls one answer holds; the bound per run that
docs/langgraph.md names is LangChain's own ``ToolCallLimitMiddleware``, which composes with the
gate (put before it): the calls it lets through are decided, the others never reach the tools."""

from __future__ import annotations

from pathlib import Path

from langchain.agents.middleware import ToolCallLimitMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from test_langgraph import _make_team, _tools
from test_langgraph_r68_invalid_tool_calls import GO, _Answers, _tool_entries

from agentgate.integrations.langgraph import create_gated_agent


def _flood(count: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "search", "args": {"query": str(n)}, "id": f"c{n}"} for n in range(count)],
    )


def test_a_run_limit_before_the_gate_bounds_the_calls_decided(tmp_path: Path) -> None:
    """Review R69: an answer of 300 allowed calls ran 300 tools and cost 300 decisions (the policy
    has no bound per answer, by design); with ``ToolCallLimitMiddleware(run_limit=5)`` before the
    gate, 5 are decided and run, and the others are answered by LangChain without running."""
    team = _make_team(tmp_path)
    try:
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=_Answers(answers=[_flood(300)]),
            model_name="scripted",
            tools=_tools(team),
            middleware=[ToolCallLimitMiddleware(run_limit=5)],
        )
        result = agent.invoke(GO, context=team.supervisor)
        assert len(team.ran) == 5
        assert sorted(e.kind for e in _tool_entries(team)) == ["allow"] * 5 + ["outcome"] * 5
        answered = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert len(answered) == 300
    finally:
        team.gate.close()


def test_without_a_limit_every_call_of_an_answer_is_decided(tmp_path: Path) -> None:
    """Review R69: without a limit each call of the answer is a decision of its own, recorded
    one by one (the log names every call decided)."""
    team = _make_team(tmp_path)
    try:
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=_Answers(answers=[_flood(40)]),
            model_name="scripted",
            tools=_tools(team),
        )
        agent.invoke(GO, context=team.supervisor)
        assert len(team.ran) == 40
        allowed = [e for e in _tool_entries(team) if e.kind == "allow"]
        assert sorted(e.args["query"] for e in allowed) == sorted(str(n) for n in range(40))
    finally:
        team.gate.close()
