"""A delegation tool call reads its run's context, not the supervisor's whole state.

The delegation tool used to take LangChain's injected ``ToolRuntime``; LangChain validates and
then serializes an injected runtime on every call, the graph state and each of its messages
included: about 3 ms per delegation with benchmarks/langgraph_overhead.py's agents (scratch runs,
docs/langgraph.md's twelfth pass), growing with the supervisor's conversation. The tool now
reads the context and config where LangGraph keeps them for the running task and takes only the
tool call id. These tests count how often a message of the supervisor's state is serialized
while it delegates (sync and async): never; and that the tool, called outside a graph, finds no
identity and refuses.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from pydantic import SerializerFunctionWrapHandler, model_serializer
from test_langgraph import Team, _ask_researcher, _calls, _tool_messages
from test_langgraph import team as team  # the fixture

from agentgate.errors import Denied
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

SERIALIZED = [0]


class CountedMessage(HumanMessage):
    """A user message that counts how often pydantic serializes it."""

    @model_serializer(mode="wrap")
    def _count(self, handler: SerializerFunctionWrapHandler) -> Any:
        SERIALIZED[0] += 1
        return handler(self)


def _supervisor(team: Team) -> Any:
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find papers"}))])
    return create_gated_agent(team.gate, name="supervisor", model=model, tools=[_ask_researcher(team)])


def _conversation() -> list[HumanMessage]:
    return [CountedMessage(content=f"earlier turn {i}") for i in range(20)] + [HumanMessage(content="go")]


def test_a_delegation_never_serializes_the_supervisors_messages(team: Team) -> None:
    SERIALIZED[0] = 0
    result = _supervisor(team).invoke({"messages": _conversation()}, context=team.supervisor)
    assert [m.status for m in _tool_messages(result)] == ["success"]
    assert team.ran == ["search:papers"]  # the sub-agent ran on its delegated grant
    assert SERIALIZED[0] == 0


async def test_an_async_delegation_never_serializes_the_supervisors_messages(team: Team) -> None:
    SERIALIZED[0] = 0
    result = await _supervisor(team).ainvoke({"messages": _conversation()}, context=team.supervisor)
    assert [m.status for m in _tool_messages(result)] == ["success"]
    assert team.ran == ["search:papers"]
    assert SERIALIZED[0] == 0


def test_a_delegation_tool_called_outside_a_graph_finds_no_identity_and_is_refused(team: Team) -> None:
    call = {"type": "tool_call", "id": "c1", "name": "ask_researcher", "args": {"task": "find papers"}}
    with pytest.raises(Denied, match="no identity in the run context"):
        _ask_researcher(team).invoke(call)
    assert team.ran == []
    assert team.gate.delegations == []
