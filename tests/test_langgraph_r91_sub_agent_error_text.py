"""Review R91: an agentgate error out of a delegated sub-agent's run (its chat model's
``BackendFailed``, carrying the backend's words) was told to the supervisor's model with its text,
secrets and all (``agentgate: tool ask_researcher failed (vllm-1: ... 'account sk-live-... is
locked')``), with or without ``enforce``, under ``invoke`` and ``ainvoke``, where the same error
raised by an ordinary tool's own code is told by its type only. Rule (docs/langgraph.md): a
sub-agent behind a ``delegation_tool`` that raises is a failing tool, told by the error's type;
only the gate's own refusal of the delegation is told with its text."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from test_langgraph import Team, _ask_researcher, _calls, _make_team

from agentgate.errors import BackendFailed
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}
SECRET = "sk-live-SECRET456"
FAILED = f"vllm-1: the backend reported an error: 'account {SECRET} is locked'"


class _BackendDown(ScriptedChatModel):
    """A sub-agent's chat model whose backend answers with an error naming a secret."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise BackendFailed(FAILED)

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        raise BackendFailed(FAILED)


def _told(team: Team, ask: Any, mode: str, enforce: bool) -> ToolMessage:
    """What the supervisor's model was told of its one delegation, run ``sync`` or ``async``."""
    supervisor = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "t"}))]),
        tools=[ask],
        gate_models=False,
        enforce=enforce,
    )
    if mode == "sync":
        result = supervisor.invoke(GO, context=team.supervisor)
    else:
        result = asyncio.run(supervisor.ainvoke(GO, context=team.supervisor))
    [told] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return told


@pytest.mark.parametrize("enforce", [False, True])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sub_agents_agentgate_error_is_told_by_its_type_only(
    tmp_path: Path, mode: str, enforce: bool
) -> None:
    team = _make_team(tmp_path)
    try:
        researcher = create_gated_agent(
            team.gate, name="researcher", model=_BackendDown(turns=[]), tools=[], gate_models=False
        )
        told = _told(team, _ask_researcher(team, agent=researcher), mode, enforce)
        assert told.status == "error"
        assert told.content == "agentgate: tool ask_researcher failed (BackendFailed).", told.content
    finally:
        team.gate.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_gates_refusal_of_the_delegation_is_still_told_with_its_text(tmp_path: Path, mode: str) -> None:
    """The gate's own refusal (``Gate.delegate``, before the sub-agent runs) keeps its text: the
    model can tell what it may not hand on."""
    team = _make_team(tmp_path)
    try:
        told = _told(team, _ask_researcher(team, capabilities=["tool:search", "tool:shell"]), mode, False)
        assert told.status == "error" and "hand on tool:shell" in str(told.content), told.content
    finally:
        team.gate.close()
