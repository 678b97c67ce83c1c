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
        if mode == "sync":
            result = supervisor.invoke(GO, context=team.supervisor)
        else:
            result = asyncio.run(supervisor.ainvoke(GO, context=team.supervisor))
        [told] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert told.content == "agentgate: tool ask_researcher failed (StoreError); the failure is recorded."
    finally:
        team.gate.close()
