"""Review R86: a tool's ``Command`` whose messages hold an integer beyond 64 bits is kept with each
such integer as its decimal text (tests/test_langgraph_r59b_tool_results.py) whatever form
LangGraph's ``ToolNode`` takes its messages in: a list update (a graph whose state is a list of
messages) and a message dict (``{"role": "tool", ...}``) too. Until then such a result was not
kept, and its call recorded ``error``, where a ``ToolMessage`` in a mapping update was kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import gated_tool_node
from agentgate.integrations.langgraph._tool_calls import _storable_result
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
tools:
  search:
    args: {{query: {{type: string, required: true}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:search
    ttl_s: 3600
"""

HUGE = 10**30
FOUND: list[Any] = [{"type": "text", "text": "order created", "order_id": HUGE}]
KEPT = [{"type": "text", "text": "order created", "order_id": str(HUGE)}]
LIST_STATE: Any = Annotated[list, add_messages]
"""A graph's state that is a list of messages (``ToolNode``'s list input)."""
ASKED = AIMessage(content="", tool_calls=[{"name": "search", "args": {"query": "q"}, "id": "c1"}])


def _as_object(call_id: str) -> ToolMessage:
    return ToolMessage(content=FOUND, tool_call_id=call_id)


def _as_dict(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "content": FOUND, "tool_call_id": call_id}


ANSWERS: dict[str, tuple[Any, Callable[[str], Command[Any]]]] = {
    "list of a ToolMessage": (LIST_STATE, lambda call_id: Command(update=[_as_object(call_id)])),
    "list of a message dict": (LIST_STATE, lambda call_id: Command(update=[_as_dict(call_id)])),
    "mapping of a message dict": (
        MessagesState,
        lambda call_id: Command(update={"messages": [_as_dict(call_id)]}),
    ),
}
"""Each form of a tool's answer: the graph's state it is given in, and the ``Command`` by call id."""


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity]]:
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    made = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    yield made, made.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    made.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("form", list(ANSWERS))
def test_a_command_message_with_an_integer_beyond_64_bits_is_kept_as_text(
    gate: tuple[Gate, AgentIdentity], form: str, mode: str
) -> None:
    """Review R86: in a list update (or as a message dict) the message's integer was not made text,
    so the result was thrown away: the model was told the result could not be kept, the call
    recorded ``error``."""
    state, command = ANSWERS[form]

    def search(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        return command(tool_call_id)

    tool = StructuredTool.from_function(func=search, name="search", description="search")
    the_gate, boss = gate
    graph: Any = StateGraph(state, context_schema=AgentIdentity)
    graph.add_node("tools", gated_tool_node(the_gate, [tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    compiled = graph.compile(checkpointer=InMemorySaver())
    given = [ASKED] if state is LIST_STATE else {"messages": [ASKED]}
    config: Any = {"configurable": {"thread_id": "t"}}
    if mode == "sync":
        out = compiled.invoke(given, config, context=boss)
    else:
        out = asyncio.run(compiled.ainvoke(given, config, context=boss))
    messages = out if isinstance(out, list) else out["messages"]
    assert [(m.status, m.content) for m in messages if isinstance(m, ToolMessage)] == [("success", KEPT)]
    the_gate.flush()
    assert [e.status for e in the_gate.audit.entries() if e.kind == "outcome"] == ["ok"]


def test_only_a_message_dict_that_reads_as_a_tool_message_is_made_text() -> None:
    """A message dict of another role holding such an integer is left as it is, so the result is
    not kept (as a ``HumanMessage`` in the update is not)."""
    said = {"role": "user", "content": FOUND}
    unkept: Any = _storable_result(Command(update=[said]), "c1", "search")
    assert isinstance(unkept, ToolMessage) and unkept.status == "error"
    assert said["content"] is FOUND  # the tool's own dict is not changed


def test_the_tools_own_command_is_not_changed() -> None:
    """The result kept is a copy: the tool's ``Command`` and its messages are as it made them."""
    message = _as_dict("c1")
    command: Command[Any] = Command(update=[message])
    kept = _storable_result(command, "c1", "search")
    assert isinstance(kept, Command) and kept.update == [{**message, "content": KEPT}]
    assert command.update == [message] and message["content"] is FOUND
