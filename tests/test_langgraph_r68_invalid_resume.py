"""A tool that calls ``interrupt(..., response_schema=...)`` (LangGraph 1.2), resumed with a value
its schema refuses, gets LangGraph's ``ValidationError`` marked as an invalid resume: ``ToolNode``
lets it fail the run so that the interrupt stays pending and can be answered again. The gated
call is a pause, not a failure: the run fails as it would without agentgate, the outcome is
``paused``, and a valid answer then runs the tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from pydantic import BaseModel, ValidationError
from test_langgraph import Team, _ask_researcher, _calls, _entries, _make_team, _tool_messages

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}
CONFIG = {"configurable": {"thread_id": "t"}}


class Answer(BaseModel):
    ok: bool


def _asking_tool(name: str = "search") -> StructuredTool:
    def ask(query: str) -> str:
        answer = interrupt({"query": query}, response_schema=Answer)
        return f"answered {answer}"

    return StructuredTool.from_function(func=ask, name=name, description="asks a person")


def _agent(team: Team, tool: StructuredTool, **kwargs: Any) -> Any:
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls((tool.name, {"query": "a"}))], final="Gave up."),
        tools=[tool],
        gate_models=False,
        **kwargs,
    )


def _outcomes(team: Team) -> list[tuple[str | None, tuple[str, ...]]]:
    return [(e.status, e.reasons) for e in _entries(team.gate) if e.kind == "outcome"]


def test_an_invalid_resume_of_a_tools_own_interrupt_fails_the_run_and_can_be_answered_again(
    tmp_path: Path,
) -> None:
    """Review R68: the resume value the tool's ``response_schema`` refused was told to the model
    as the tool's failure ('tool search failed (ValidationError)'), recorded ``error``, and the
    run went on: the interrupt was gone, no valid answer could be given any more."""
    team = _make_team(tmp_path)
    agent = _agent(team, _asking_tool(), checkpointer=InMemorySaver())
    try:
        agent.invoke(GO, CONFIG, context=team.supervisor)
        with pytest.raises(ValidationError):
            agent.invoke(Command(resume={"ok": "not a yes or no"}), CONFIG, context=team.supervisor)
        assert agent.get_state(CONFIG).interrupts  # still pending, to be answered again
        result = agent.invoke(Command(resume={"ok": True}), CONFIG, context=team.supervisor)
        (told,) = _tool_messages(result)
        assert (told.status, told.content) == ("success", "answered ok=True")
        assert _outcomes(team) == [
            ("paused", ("GraphInterrupt",)),
            ("paused", ("ValidationError",)),
            ("ok", ()),
        ]
    finally:
        team.gate.close()


async def test_an_invalid_resume_fails_the_run_under_ainvoke_too(tmp_path: Path) -> None:
    """Review R68: the same under ``ainvoke`` (the sync tool runs in a worker thread)."""
    team = _make_team(tmp_path)
    agent = _agent(team, _asking_tool(), checkpointer=InMemorySaver())
    try:
        await agent.ainvoke(GO, CONFIG, context=team.supervisor)
        with pytest.raises(ValidationError):
            await agent.ainvoke(Command(resume={"ok": "not a yes or no"}), CONFIG, context=team.supervisor)
        result = await agent.ainvoke(Command(resume={"ok": False}), CONFIG, context=team.supervisor)
        assert [m.content for m in _tool_messages(result)] == ["answered ok=False"]
        assert [status for status, _ in _outcomes(team)] == ["paused", "paused", "ok"]
    finally:
        team.gate.close()


def test_an_invalid_resume_inside_a_sub_agent_fails_the_supervisors_run(tmp_path: Path) -> None:
    """Review R68: a delegation whose sub-agent's tool got an invalid resume was told to the
    supervisor's model as a failed delegation, and the interrupt was lost."""
    team = _make_team(tmp_path)
    researcher = create_gated_agent(
        team.gate,
        name="researcher",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "a"}))], final="Found it."),
        tools=[_asking_tool()],
        gate_models=False,
    )
    ask = _ask_researcher(team, researcher, capabilities=["tool:search"])
    supervisor = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls((ask.name, {"task": "look"}))], final="Gave up."),
        tools=[ask],
        gate_models=False,
        checkpointer=InMemorySaver(),
    )
    try:
        supervisor.invoke(GO, CONFIG, context=team.supervisor)
        with pytest.raises(ValidationError):
            supervisor.invoke(Command(resume={"ok": "not a yes or no"}), CONFIG, context=team.supervisor)
        assert supervisor.get_state(CONFIG).interrupts
        result = supervisor.invoke(Command(resume={"ok": True}), CONFIG, context=team.supervisor)
        assert [m.status for m in _tool_messages(result)] == ["success"]
    finally:
        team.gate.close()
