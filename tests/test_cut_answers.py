"""A tool call of a model answer stopped at its output limit is not run (docs/langgraph.md,
Tool calls of a cut answer): its arguments may be incomplete, and a streamed answer's are parsed
by LangChain as partial JSON (``{"amount": 50`` of what was to be 5000 becomes ``amount`` 50).
Real langgraph/langchain, a real SQLite store; the answers come from a scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from test_langgraph import Team, _calls, _entries, _make_team, _tools

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

INPUT = {"messages": [{"role": "user", "content": "go"}]}


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


class CutModel(ScriptedChatModel):
    """``ScriptedChatModel`` whose first answer says how it finished (``metadata``)."""

    metadata: dict[str, Any]

    def _answer(self, messages: list[BaseMessage]) -> tuple[AIMessage, dict[str, Any]]:
        message, payload = super()._answer(messages)
        if not any(isinstance(m, AIMessage) for m in messages):
            message.response_metadata = dict(self.metadata)
        return message, payload


def _run(team: Team, metadata: dict[str, Any], *, use_async: bool = False) -> list[ToolMessage]:
    model = CutModel(
        turns=[_calls(("search", {"query": "kv"}), ("search", {"query": "gpu"}))], metadata=metadata
    )
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
    if use_async:
        result = asyncio.run(agent.ainvoke(INPUT, context=team.supervisor))
    else:
        result = agent.invoke(INPUT, context=team.supervisor)
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize(
    "metadata",
    [
        {"finish_reason": "length"},  # OpenAI, vLLM, SGLang, llama.cpp
        {"stop_reason": "max_tokens"},  # Anthropic
        {"finish_reason": "MAX_TOKENS"},  # Gemini
        {"done_reason": "length"},  # Ollama
        {"stopReason": "max_tokens"},  # Bedrock Converse
    ],
)
def test_no_tool_call_of_a_cut_answer_runs(team: Team, metadata: dict[str, Any], use_async: bool) -> None:
    answers = _run(team, metadata, use_async=use_async)
    assert team.ran == []
    assert [m.status for m in answers] == ["error", "error"]
    assert all("cut at its output limit" in str(m.content) for m in answers)
    denied = [e for e in _entries(team.gate) if e.kind == "deny"]
    assert len(denied) == 2 and all("cut at its output limit" in e.reasons[0] for e in denied)
    assert not [e for e in _entries(team.gate) if e.kind == "allow" and e.resource.startswith("tool:")]
    assert team.gate.verify().first_bad_index is None


@pytest.mark.parametrize("metadata", [{"finish_reason": "tool_calls"}, {"stop_reason": "tool_use"}, {}])
def test_the_tool_calls_of_an_answer_that_finished_run(team: Team, metadata: dict[str, Any]) -> None:
    answers = _run(team, metadata)
    assert sorted(team.ran) == ["search:gpu", "search:kv"]  # run in parallel: in either order
    assert [m.status for m in answers] == ["success", "success"]
