"""Review R90b: with ``enforce=True``, a refusal out of a tool's run (a nested gated call the
tool's code makes, which the gate refuses) was told to the model as ``tool pay failed (Denied)``
and the run went on, since R90 exempted every agentgate error the tool's code raised. ``enforce``
raises ``Denied`` for every refusal (docs/langgraph.md), as for a delegation's: a ``Denied`` as it
is, another ``AuthorityError`` as ``Denied``; the tool's other agentgate errors stay a failing
tool (tests/test_langgraph_r90_enforce_tool_error.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import StructuredTool
from test_langgraph_r90_enforce_tool_error import GO, _gate, _model

from agentgate.capabilities import Call
from agentgate.errors import Denied, Revoked
from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent

POLICY = """
version: 1
trust_anchors: {root: {did: "ROOT"}}
principals:
  boss: {kind: agent, did: "BOSS", roles: [boss]}
tools:
  pay: {args: {amount: {type: integer, required: true}}}
  refund: {args: {amount: {type: integer, required: true}}}
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


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, Any]]:
    yield from _gate(tmp_path, POLICY)


def test_an_enforced_run_raises_the_denied_of_a_nested_gated_call(gate: tuple[Gate, Any]) -> None:
    made, boss = gate

    def pay(amount: int) -> str:
        return made.run(made.authorize(boss, Call.tool("refund", {"amount": amount})), lambda: "refunded")

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")
    agent = create_gated_agent(made, name="boss", model=_model(), tools=[tool], enforce=True)
    with pytest.raises(Denied, match=r"refused tool:refund .*does not cover tool:refund invoke"):
        agent.invoke(GO, context=boss)


def test_an_enforced_async_run_raises_the_denied_of_a_nested_gated_call(gate: tuple[Gate, Any]) -> None:
    made, boss = gate

    async def pay(amount: int) -> str:
        auth = await made.to_thread(made.authorize, boss, Call.tool("refund", {"amount": amount}))
        return await made.arun(auth, lambda: asyncio.sleep(0, "refunded"))

    tool = StructuredTool.from_function(coroutine=pay, name="pay", description="pay")
    agent = create_gated_agent(made, name="boss", model=_model(), tools=[tool], enforce=True)
    with pytest.raises(Denied, match=r"refused tool:refund .*does not cover tool:refund invoke"):
        asyncio.run(agent.ainvoke(GO, context=boss))


def test_an_enforced_run_raises_another_authority_error_of_the_tool_as_denied(gate: tuple[Gate, Any]) -> None:
    made, boss = gate

    def pay(amount: int) -> str:
        raise Revoked("the grant of the nested call is revoked")

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")
    agent = create_gated_agent(made, name="boss", model=_model(), tools=[tool], enforce=True)
    with pytest.raises(Denied, match="the grant of the nested call is revoked") as raised:
        agent.invoke(GO, context=boss)
    assert isinstance(raised.value.__cause__, Revoked)
