"""Review R58: a model's tool call holding an integer beyond the policy's range (|v| < 2**63, past
what a 64-bit value holds) is refused before it is decided, with or without a checkpointer, and
the model is told which argument: with one (InMemorySaver, SqliteSaver, sync and async), the
run ended in LangGraph's ``TypeError: Type is not msgpack serializable: AIMessage``; without
one, a call with no constraint on that argument was allowed and ran."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from test_langgraph_exact_numbers import _AsWritten

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import DispatchedChatModel, create_gated_agent, gated_tool_node
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
tools:
  payments.refund:
    args:
      order_id: {{type: string, required: true}}
      amount: {{type: integer, required: true}}
      currency: {{type: string}}
    loggable: [order_id, amount]
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:payments.refund
      - resource: model:scripted
    ttl_s: 3600
"""

HUGE = 100000000000000000000000000000
ARGS = {"order_id": "O-1", "amount": HUGE, "currency": "EUR"}
SAID = f"argument 'amount' is {HUGE}, an integer beyond the range a call's arguments may hold"


class _Paying:
    def __init__(self, tmp_path: Path) -> None:
        keys = {n: SigningKey.generate() for n in ("root", "boss")}
        policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
        self.gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
        self.boss: AgentIdentity = self.gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        self.path = tmp_path
        self.refunded: list[object] = []

        def refund(order_id: str, amount: int, currency: str = "EUR") -> str:
            self.refunded.append(amount)
            return "refunded"

        self.tool = StructuredTool.from_function(func=refund, name="payments.refund", description="refund")

    def agent(self, checkpointer: Any, answer: AIMessage | None = None) -> Any:
        asked = answer or AIMessage(
            content="", tool_calls=[{"name": "payments.refund", "args": ARGS, "id": "c1"}]
        )
        model = _AsWritten(turns=[asked, AIMessage(content="done")])
        return create_gated_agent(
            self.gate, name="boss", model=model, tools=[self.tool], checkpointer=checkpointer
        )

    def refusals(self) -> list[Any]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if e.resource == "tool:payments.refund"]


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[_Paying]:
    made = _Paying(tmp_path)
    yield made
    made.gate.close()


def _run(paying: _Paying, saver: str, mode: str, answer: AIMessage | None = None) -> dict[str, Any]:
    config: Any = {"configurable": {"thread_id": "t"}}
    asked = {"messages": [{"role": "user", "content": "refund O-1"}]}
    if mode == "sync":
        with opened(paying.path / "checkpoints.sqlite", check_same_thread=False) as conn:
            checkpointer = {"none": None, "memory": InMemorySaver(), "sqlite": SqliteSaver(conn)}[saver]
            result: dict[str, Any] = paying.agent(checkpointer, answer).invoke(
                asked, config, context=paying.boss
            )
            return result

    async def run() -> dict[str, Any]:
        async with AsyncSqliteSaver.from_conn_string(str(paying.path / "checkpoints.sqlite")) as sqlite:
            checkpointer = {"none": None, "memory": InMemorySaver(), "sqlite": sqlite}[saver]
            done: dict[str, Any] = await paying.agent(checkpointer, answer).ainvoke(
                asked, config, context=paying.boss
            )
            return done

    return asyncio.run(run())


def _check_refused(paying: _Paying, result: dict[str, Any]) -> None:
    assert paying.refunded == []  # the call is not run
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error" and SAID in str(answer.content)  # the model is told which argument
    assert result["messages"][-1].content == "done"  # the model answered after it
    [refusal] = paying.refusals()  # recorded as the other unusable answers are: a deny, the reason
    assert refusal.kind == "deny" and any(SAID in r for r in refusal.reasons)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("saver", ["none", "memory", "sqlite"])
def test_a_tool_call_with_an_integer_beyond_64_bits_is_refused_and_the_run_goes_on(
    paying: _Paying, saver: str, mode: str
) -> None:
    """Review R58: an integer beyond 64 bits in a tool call crashed a checkpointed run (msgpack)."""
    _check_refused(paying, _run(paying, saver, mode))


@pytest.mark.parametrize("saver", ["none", "memory"])
def test_an_openai_compatible_answer_with_such_an_integer_is_refused_too(paying: _Paying, saver: str) -> None:
    """Review R58: the same call as an OpenAI-compatible endpoint writes it (its arguments as text)."""
    text = '{"order_id":"O-1","amount":100000000000000000000000000000,"currency":"EUR"}'
    body = {"id": "c1", "type": "function", "function": {"name": "payments.refund", "arguments": text}}
    served = type(
        "Served",
        (),
        {
            "body": {"choices": [{"message": {"content": "", "tool_calls": [body]}}]},
            "content": "",
            "usage": type("Usage", (), {"prompt_tokens": 10, "completion_tokens": 5})(),
            "backend": "b",
            "finish_reason": "tool_calls",
        },
    )()
    answer = DispatchedChatModel._result(served).generations[0].message
    assert isinstance(answer, AIMessage) and answer.tool_calls[0]["args"]["amount"] == HUGE
    _check_refused(paying, _run(paying, saver, "sync", answer))


def test_an_integer_within_the_range_is_decided_as_usual(paying: _Paying) -> None:
    """The largest integer in range (2**63 - 1) is decided and run, with a checkpointer."""
    args = {**ARGS, "amount": 2**63 - 1}
    answer = AIMessage(content="", tool_calls=[{"name": "payments.refund", "args": args, "id": "c1"}])
    result = _run(paying, "memory", "sync", answer)
    assert [m.status for m in result["messages"] if isinstance(m, ToolMessage)] == ["success"]
    assert paying.refunded == [2**63 - 1]


def test_a_gated_tool_node_refuses_such_a_call_from_its_arguments(paying: _Paying) -> None:
    """Review R58: a hand-built graph's gated tools node (no gated model hook, no checkpointer)
    ran a call with such an integer where no constraint bounds it."""
    graph = StateGraph(MessagesState, context_schema=AgentIdentity)
    graph.add_node("tools", gated_tool_node(paying.gate, [paying.tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    asked = AIMessage(content="", tool_calls=[{"name": "payments.refund", "args": ARGS, "id": "c1"}])
    result = graph.compile().invoke({"messages": [asked]}, context=paying.boss)
    assert paying.refunded == []
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error" and SAID in str(answer.content)
    [refusal] = paying.refusals()
    assert refusal.kind == "deny" and refusal.args["amount"] == HUGE  # as the model wrote it
