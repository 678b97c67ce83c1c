"""Review R86: a tool's error answered in a ``Command`` in a form LangGraph's ``ToolNode`` takes,
other than a ``ToolMessage`` object in a mapping update's ``messages``, is an ``error`` outcome,
not charged: a message dict (``{"role": "tool", ..., "status": "error"}``, which ``ToolNode`` and
the ``add_messages`` reducer make a ``ToolMessage(status="error")``) and a list update (what a tool
answers in a graph whose state is a list of messages). Until then both were recorded ``ok`` and
charged, though the model was told of the error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, gated_tool_node
from agentgate.integrations.langgraph._calls import _failed
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:refund
    budget: {{limit: 10, unit: calls}}
    ttl_s: 3600
"""

DECLINED = "payment provider declined"
LIST_STATE: Any = Annotated[list, add_messages]
"""A graph's state that is a list of messages (``ToolNode``'s list input)."""
ASKED = AIMessage(content="", tool_calls=[{"name": "refund", "args": {"amount": 5}, "id": "c1"}])


class _Refunding:
    """A gate whose agent may call ``refund`` (ten calls of budget), the tool answering as
    ``answer`` makes of its call id."""

    def __init__(self, tmp_path: Path, answer: Callable[[str], Command[Any]]) -> None:
        keys = {n: SigningKey.generate() for n in ("root", "boss")}
        policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
        self.gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
        self.boss: AgentIdentity = self.gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        self.refunded: list[int] = []

        def refund(amount: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
            self.refunded.append(amount)
            return answer(tool_call_id)

        self.tool = StructuredTool.from_function(func=refund, name="refund", description="refund")

    def outcomes(self) -> list[str | None]:
        self.gate.flush()
        return [e.status for e in self.gate.audit.entries() if e.kind == "outcome"]

    def spent(self) -> int:
        spent, _ = self.gate.budget_usage(self.boss)[self.boss.chain.root.id]
        return int(spent)


@pytest.fixture
def made(tmp_path: Path) -> Iterator[Callable[[Callable[[str], Command[Any]]], _Refunding]]:
    gates: list[Gate] = []

    def make(answer: Callable[[str], Command[Any]]) -> _Refunding:
        refunding = _Refunding(tmp_path, answer)
        gates.append(refunding.gate)
        return refunding

    yield make
    for gate in gates:
        gate.close()


def _run(graph: Any, given: Any, refunding: _Refunding, mode: str) -> Any:
    if mode == "sync":
        return graph.invoke(given, context=refunding.boss)
    return asyncio.run(graph.ainvoke(given, context=refunding.boss))


def _tool_messages(messages: list[Any]) -> list[tuple[str, Any]]:
    return [(m.status, m.content) for m in messages if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_answered_as_a_message_dict_is_an_error_outcome(made: Any, mode: str) -> None:
    """Review R86: under ``create_agent``, ``Command(update={"messages": [{..., "status": "error"}]})``
    was recorded ``ok`` and charged one call, where the same answer as a ``ToolMessage`` was not."""

    def declined(call_id: str) -> Command[Any]:
        said = {"role": "tool", "content": DECLINED, "tool_call_id": call_id, "status": "error"}
        return Command(update={"messages": [said]})

    refunding = made(declined)
    model = ScriptedChatModel(turns=[ASKED, AIMessage(content="done")])
    agent = create_gated_agent(
        refunding.gate, name="boss", model=model, tools=[refunding.tool], gate_models=False
    )
    result = _run(agent, {"messages": [{"role": "user", "content": "refund"}]}, refunding, mode)
    assert _tool_messages(result["messages"]) == [("error", DECLINED)]  # what the model was told
    assert refunding.refunded == [5]
    assert refunding.outcomes() == ["error"]
    assert refunding.spent() == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_in_a_list_update_is_an_error_outcome(made: Any, mode: str) -> None:
    """Review R86: in a graph whose state is a list of messages, ``gated_tool_node``'s tool answering
    ``Command(update=[ToolMessage(..., status="error")])`` was recorded ``ok`` and charged."""
    refunding = made(
        lambda call_id: Command(update=[ToolMessage(DECLINED, tool_call_id=call_id, status="error")])
    )
    graph: Any = StateGraph(LIST_STATE, context_schema=AgentIdentity)
    graph.add_node("tools", gated_tool_node(refunding.gate, [refunding.tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    result = _run(graph.compile(), [ASKED], refunding, mode)
    assert _tool_messages(result) == [("error", DECLINED)]
    assert refunding.outcomes() == ["error"]
    assert refunding.spent() == 0


def test_a_success_in_either_form_is_an_ok_outcome() -> None:
    """The other status of both forms is no failure."""
    dict_form = {"role": "tool", "content": "refunded", "tool_call_id": "c1"}
    assert not _failed(Command(update={"messages": [dict_form]}))
    assert not _failed(Command(update=[ToolMessage("refunded", tool_call_id="c1")]))
    assert _failed([Command(update=[ToolMessage(DECLINED, tool_call_id="c1", status="error")])])


def test_an_update_holding_no_readable_message_is_no_failure() -> None:
    """What LangChain reads no message from (ToolNode refuses it) is read as none, not raised."""
    garbage: list[Any] = [{"status": "error"}, {"role": "robot", "content": "x"}, ("tool",), 7, None]
    assert not _failed(Command(update={"messages": garbage}))
    assert not _failed(Command(update=garbage))
    assert not _failed(Command(update={"other": [{"role": "tool", "content": "x", "status": "error"}]}))
