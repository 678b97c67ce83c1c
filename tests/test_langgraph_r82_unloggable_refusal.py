"""Review R82: a tool call the LangGraph middleware refuses before deciding it, for an integer
beyond 64 bits or a number no float holds as written, was recorded with a reason quoting the
value (``argument 'account' is 9876..., an integer beyond ...``), also of an argument the policy
does not mark loggable: ``redact_reasons`` replaces only ``name=value``. The ``deny`` entry (and
the ``Denied`` that ``enforce=True`` raises, which words the refusal as the log does) now names
such an argument without its value, sync and async, through a gated agent or a
``gated_tool_node``; the model is still told its own value, and a loggable argument's value is
still recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.graph import END, START, MessagesState, StateGraph
from test_langgraph_exact_numbers import _AsWritten

from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import create_gated_agent, gated_tool_node
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
tools:
  pay:
    args:
      amount: {{type: number}}
      account: {{type: string}}
    loggable: [amount]
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:pay
      - resource: model:scripted
    ttl_s: 3600
"""

SECRET = 987654321987654321987654321987
"""An integer beyond 64 bits the model writes in ``account``, which is not loggable."""
INEXACT = "4111111111111111.00000000000000001"
"""A number no float holds as written (read as ``4111111111111111.0``) in ``account``."""
LOGGED = 123123123123123123123123123123
"""An integer beyond 64 bits in ``amount``, which is loggable."""

CALLS = {
    "c1": f'{{"account": {SECRET}}}',
    "c2": f'{{"account": {{"card": [{SECRET}]}}}}',
    "c3": f'{{"account": {INEXACT}}}',
    "c4": f'{{"amount": {LOGGED}}}',
}


def _answer() -> AIMessage:
    """An answer asking for ``CALLS``, as a backend wrote them (``additional_kwargs``)."""
    return AIMessage(
        content="",
        tool_calls=[{"name": "pay", "args": json.loads(text), "id": i} for i, text in CALLS.items()],
        additional_kwargs={
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "pay", "arguments": text}}
                for i, text in CALLS.items()
            ]
        },
    )


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity, StructuredTool]]:
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    gate = Gate(
        parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")

    def pay(amount: float = 0, account: Any = "") -> str:
        raise AssertionError("a refused call ran")

    yield gate, boss, StructuredTool.from_function(func=pay, name="pay", description="pay")
    gate.close()


def _refusals(gate: Gate) -> list[str]:
    """Each ``deny`` entry of ``pay`` as the audit log holds it (reasons and arguments)."""
    gate.flush()
    entries = [e for e in gate.audit.entries() if e.resource == "tool:pay"]
    assert all(e.kind == "deny" for e in entries)
    return [" ".join(e.reasons) + json.dumps(e.args) for e in entries]


def _check(gate: Gate, told: dict[str, str]) -> None:
    recorded = _refusals(gate)  # in any order: an async run's calls are recorded as they come
    assert len(recorded) == 4
    assert not any(str(SECRET) in text or "4111111111111111" in text for text in recorded)
    # c1 and c2 alike: the argument named alone, never the keys inside its value (review R84:
    # until then c2's read "argument 'account''card'[0] is ...", a key is part of the value).
    assert not any("'card'" in text for text in recorded)
    for said, count in (
        ("argument 'account' is an integer beyond the range", 2),
        ("argument 'account' is a number no float holds as written; give it", 1),
        (f"argument 'amount' is {LOGGED}, an integer beyond the range", 1),
    ):
        assert sum(said in text for text in recorded) == count, said
    # The model is told its own value.
    assert f"argument 'account' is {SECRET}, an integer beyond" in told["c1"]
    assert f"argument 'account''card'[0] is {SECRET}, an integer beyond" in told["c2"]
    assert f"argument 'account' is {INEXACT}, a number no float holds" in told["c3"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_refusal_quoting_a_value_records_no_value_that_is_not_loggable(
    paying: tuple[Gate, AgentIdentity, StructuredTool], mode: str
) -> None:
    gate, boss, tool = paying
    agent = create_gated_agent(
        gate, name="boss", tools=[tool], model=_AsWritten(turns=[_answer(), AIMessage(content="done")])
    )
    asked = {"messages": [{"role": "user", "content": "pay"}]}
    result = (
        agent.invoke(asked, context=boss)
        if mode == "sync"
        else asyncio.run(agent.ainvoke(asked, context=boss))
    )
    told = {m.tool_call_id: str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}
    _check(gate, told)


def test_a_gated_tool_node_records_no_value_that_is_not_loggable(
    paying: tuple[Gate, AgentIdentity, StructuredTool],
) -> None:
    """Without the gated model hook, the integer is read from the call's arguments."""
    gate, boss, tool = paying
    graph = StateGraph(MessagesState, context_schema=AgentIdentity)
    graph.add_node("tools", gated_tool_node(gate, [tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    result = graph.compile().invoke({"messages": [_answer()]}, context=boss)
    told = {m.tool_call_id: str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}
    _check(gate, told)


def test_enforce_raises_the_refusal_as_the_log_words_it(
    paying: tuple[Gate, AgentIdentity, StructuredTool],
) -> None:
    gate, boss, tool = paying
    answer = _answer()
    answer.tool_calls = answer.tool_calls[:1]
    agent = create_gated_agent(
        gate,
        name="boss",
        tools=[tool],
        model=_AsWritten(turns=[answer, AIMessage(content="done")]),
        enforce=True,
    )
    with pytest.raises(Denied) as raised:
        agent.invoke({"messages": [{"role": "user", "content": "pay"}]}, context=boss)
    assert "argument 'account' is an integer beyond the range" in str(raised.value)
    assert str(SECRET) not in str(raised.value) and raised.value.__cause__ is None
