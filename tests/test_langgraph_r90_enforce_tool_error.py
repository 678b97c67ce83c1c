"""Review R90: with ``enforce=True``, an agentgate error a tool's own code raised (an
``InputError`` of its own, a ``BackendFailed`` of a model it called) ended the run, and its text,
secrets and all, went to the caller. ``enforce`` raises the gate's refusals; a tool that raises,
an agentgate error of its own included, becomes an error ``ToolMessage`` naming its type and the
run goes on (docs/langgraph.md), as without ``enforce`` and as for a ``ValueError``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SECRET = "sk-live-SECRET"
GO = {"messages": [{"role": "user", "content": "pay"}]}

POLICY = """
version: 1
trust_anchors: {root: {did: "ROOT"}}
principals:
  boss: {kind: agent, did: "BOSS", roles: [boss]}
tools:
  pay:
    args:
      amount: {type: integer, required: true}
models:
  scripted: {cost_per_mtok: {input: 1, output: 1}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:pay
      - resource: model:scripted
    ttl_s: 3600
"""


def _gate(tmp_path: Path, policy: str) -> Iterator[tuple[Gate, Any]]:
    """A gate on ``policy`` and the chain ``boss`` holds, the gate closed after."""
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    text = policy.replace("ROOT", keys["root"].did).replace("BOSS", keys["boss"].did)
    made = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    yield made, made.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    made.close()


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, Any]]:
    yield from _gate(tmp_path, POLICY)


def _model() -> ScriptedChatModel:
    asked = AIMessage(content="", tool_calls=[{"name": "pay", "args": {"amount": 1}, "id": "c1"}])
    return ScriptedChatModel(turns=[asked, AIMessage(content="done")])


def _told_its_type(made: Gate, result: dict[str, Any]) -> None:
    [told] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert told.status == "error"
    assert str(told.content) == "agentgate: tool pay failed (InputError); the failure is recorded."
    assert result["messages"][-1].content == "done"
    made.flush()
    outcomes = [e for e in made.audit.entries() if e.resource == "tool:pay" and e.kind == "outcome"]
    assert [e.status for e in outcomes] == ["error"]
    assert all(SECRET not in " ".join(e.reasons) for e in made.audit.entries())


def test_an_enforced_run_tells_the_model_of_a_tools_own_agentgate_error(gate: tuple[Gate, Any]) -> None:
    """Review R90: the tool's own InputError ended the invoke, its text handed to the caller."""
    made, boss = gate

    def pay(amount: int) -> str:
        raise InputError(f"bad account {SECRET}")

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")
    agent = create_gated_agent(made, name="boss", model=_model(), tools=[tool], enforce=True)
    _told_its_type(made, agent.invoke(GO, context=boss))


def test_an_enforced_async_run_tells_the_model_of_a_tools_own_agentgate_error(
    gate: tuple[Gate, Any],
) -> None:
    """Review R90: the same under ainvoke, for a coroutine tool."""
    made, boss = gate

    async def pay(amount: int) -> str:
        raise InputError(f"bad account {SECRET}")

    tool = StructuredTool.from_function(coroutine=pay, name="pay", description="pay")
    agent = create_gated_agent(made, name="boss", model=_model(), tools=[tool], enforce=True)
    _told_its_type(made, asyncio.run(agent.ainvoke(GO, context=boss)))
