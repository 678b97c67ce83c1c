"""Review R60: a failure of agentgate's own machinery (the store: its path, its SQL error) is told
to the model by its type only. A supervisor whose delegation failed on the store was told the
store's path and SQLite's words (``agentgate: tool ask_researcher failed (SQLite error on
/srv/...: disk I/O error)``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from test_langgraph import _ask_researcher, _calls, _make_team

from agentgate.errors import StoreError
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}


def _told(supervisor: Any, team: Any, mode: str) -> ToolMessage:
    """What the supervisor's model was told of its one tool call, run ``sync`` or ``async``."""
    if mode == "sync":
        result = supervisor.invoke(GO, context=team.supervisor)
    else:
        result = asyncio.run(supervisor.ainvoke(GO, context=team.supervisor))
    [told] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return told


FAILED = "SQLite error on /srv/agentgate/team-secret.db: disk I/O error"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_delegation_that_failed_on_the_store_is_told_by_its_type(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R60, the supervisor's model was told the store's path and its SQL error."""
    team = _make_team(tmp_path)
    try:

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise StoreError(FAILED)

        monkeypatch.setattr(team.gate, "delegate", failing)
        supervisor = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "t"}))]),
            tools=[_ask_researcher(team)],
            gate_models=False,
        )
        told = _told(supervisor, team, mode)
        # Not "the failure is recorded" (review R81): the store failed, and a delegation has no outcome.
        assert told.content == "agentgate: tool ask_researcher failed (StoreError)."
    finally:
        team.gate.close()


class _Crashing(ScriptedChatModel):
    """A sub-agent's chat model that raises whatever it is asked."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("model down")

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("model down")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sub_agent_that_raised_is_not_said_to_be_recorded(tmp_path: Path, mode: str) -> None:
    """Review R81: a delegation whose sub-agent raised was told to the supervisor's model as
    "...; the failure is recorded.", though a delegation's ``allow`` has no outcome entry and no
    entry records the failure. Rule: the model is told the failure by its type, and no more."""
    team = _make_team(tmp_path)
    try:
        researcher = create_gated_agent(
            team.gate, name="researcher", model=_Crashing(turns=[]), tools=[], gate_models=False
        )
        supervisor = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "t"}))]),
            tools=[_ask_researcher(team, agent=researcher)],
            gate_models=False,
        )
        told = _told(supervisor, team, mode)
        assert told.content == "agentgate: tool ask_researcher failed (RuntimeError).", told.content
        kinds = [(e.kind, e.resource) for e in team.gate.audit.entries()]
        assert ("allow", "agent:researcher") in kinds
        assert not any(kind == "outcome" and resource == "agent:researcher" for kind, resource in kinds)
    finally:
        team.gate.close()
