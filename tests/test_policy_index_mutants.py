"""A LangGraph run whose context carries something else than an agent identity
(agentgate/integrations/langgraph.py ``identity_from_context``) is a run without one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from langchain_core.messages import ToolMessage
from test_langgraph import _calls, _entries, _make_team, _tools

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, identity_from_context


@pytest.mark.parametrize("carried", ["supervisor", {"name": "supervisor"}, None])
def test_a_run_context_that_carries_something_else_than_an_identity_is_a_run_without_one(
    tmp_path: Path, carried: object
) -> None:
    # l05: ``identity_from_context`` returned whatever a context's ``agentgate`` attribute or key
    # held; a run whose context carries a name or a dict there crashed in the middleware with an
    # AttributeError (``'str' object has no attribute 'did'``) instead of the refusal of a run
    # without an identity: recorded, nothing run.
    assert identity_from_context({"agentgate": carried}) is None
    assert identity_from_context(SimpleNamespace(agentgate=carried)) is None
    team = _make_team(tmp_path)
    try:
        assert identity_from_context({"agentgate": team.supervisor}) is team.supervisor
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))]),
            tools=_tools(team),
            gate_models=False,
        )
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "go"}]}, context=SimpleNamespace(agentgate=carried)
        )
        (refused,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert refused.status == "error" and "carries no agent identity" in str(refused.content)
        assert team.ran == []
        denies = [e for e in _entries(team.gate) if e.kind == "deny" and e.resource == "tool:search"]
        assert len(denies) == 1
    finally:
        team.gate.close()
