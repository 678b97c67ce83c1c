"""``Gate.approve`` given LangGraph's ``Interrupt`` itself, found by following docs/quickstart.md
as a developer new to agentgate (review R71)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {root: {did: "ROOT"}}
principals:
  desk: {kind: agent, did: "DESK", roles: [desk]}
  alice: {kind: human, did: "ALICE", roles: [lead]}
tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: number, required: true}}
    loggable: [order_id, amount]
roles:
  desk:
    kind: agent
    capabilities: [{resource: "tool:payments.refund"}]
    ttl_s: 3600
  lead: {kind: human, ttl_s: 3600}
approvals:
  refunds: {resource: "tool:payments.refund", approvers: [alice]}
"""


@tool("payments.refund")
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in ("root", "desk", "alice")}


@pytest.fixture
def gate(tmp_path: Path, keys: dict[str, SigningKey]) -> Iterator[Gate]:
    text = POLICY
    for name, key in keys.items():
        text = text.replace(f'"{name.upper()}"', key.did)
    opened = Gate(parse_policy(text, source="desk.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    yield opened
    opened.close()


def _paused(gate: Gate, keys: dict[str, SigningKey]) -> tuple[Any, Any, dict[str, Any], Any]:
    """The desk agent, paused on the approval of one refund, as docs/quickstart.md runs it."""
    asks = AIMessage(
        "", tool_calls=[{"name": "payments.refund", "id": "c1", "args": {"order_id": "O-1", "amount": 800}}]
    )
    agent = create_gated_agent(
        gate,
        name="desk",
        model=ScriptedChatModel(turns=[asks]),
        tools=[refund],
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    identity = gate.issue(keys["root"], name="desk", key=keys["desk"], role="desk")
    config = {"configurable": {"thread_id": "ticket-1"}}
    state = agent.invoke({"messages": [("user", "refund O-1")]}, config, context=identity)
    return agent, identity, config, state


def test_approve_given_the_interrupt_itself_says_to_pass_its_value(
    gate: Gate, keys: dict[str, SigningKey]
) -> None:
    """Review R71: ``gate.approve(state["__interrupt__"][0], key)``, the interrupt rather than its
    ``.value`` (the first thing a developer writes), was refused as "the approval payload must be
    the interrupt payload (a mapping), got a Interrupt": it said what was wrong but not what to
    pass. It now names the fix, ``.value``, and signs nothing; the payload itself still signs and
    the resumed run refunds."""
    agent, identity, config, state = _paused(gate, keys)
    pending = state["__interrupt__"][0]
    with pytest.raises(InputError) as refused:
        gate.approve(pending, keys["alice"])
    message = str(refused.value)
    assert "Interrupt" in message and ".value" in message, message
    approval = gate.approve(pending.value, keys["alice"])
    state = agent.invoke(Command(resume=approval), config, context=identity)
    assert state["messages"][-2].content == "refunded 800.0 on O-1"
