"""Review R60: a refusal tells the model the bound its call crossed, not every capability its grant
holds. A call of a tool the grant does not cover was refused with ``the grant does not cover
tool:other invoke (it holds tool:pay?api_key=sk-live-..., model:scripted)``: the other tools'
rules, with what a grant pins for an argument the framework injects (a key, an account). The
audit entry keeps the reason whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolArg, StructuredTool
from test_langgraph_exact_numbers import _AsWritten

from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {root: {did: "ROOT"}}
principals:
  boss: {kind: agent, did: "BOSS", roles: [boss]}
tools:
  pay:
    args:
      amount: {type: integer, required: true}
  other:
    args: {}
models:
  scripted: {cost_per_mtok: {input: 1, output: 1}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:pay
        constraints:
          api_key: {eq: "sk-live-SECRET"}
      - resource: model:scripted
    ttl_s: 3600
"""


def boss_gate(tmp_path: Path) -> Iterator[tuple[Gate, Any]]:
    """A Gate on POLICY and boss's root grant (the fixture ``gate`` here and in
    test_langgraph_r60b_enforced_refusal)."""
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    text = POLICY.replace("ROOT", keys["root"].did).replace("BOSS", keys["boss"].did)
    made = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    yield made, made.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    made.close()


def pay_and_other() -> list[StructuredTool]:
    """``pay`` (its ``api_key`` injected, which the grant pins) and ``other`` (no capability)."""

    def pay(amount: int, api_key: Annotated[str, InjectedToolArg] = "") -> str:
        return "paid"

    def other() -> str:
        return "done"

    return [
        StructuredTool.from_function(func=pay, name="pay", description="pay"),
        StructuredTool.from_function(func=other, name="other", description="other"),
    ]


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, Any]]:
    yield from boss_gate(tmp_path)


def test_a_call_no_capability_covers_is_not_told_what_the_grant_holds(gate: tuple[Gate, Any]) -> None:
    """Review R60, the refusal listed every capability held, another tool's pinned key included."""
    made, boss = gate

    tools = pay_and_other()
    asked = AIMessage(content="", tool_calls=[{"name": "other", "args": {}, "id": "c1"}])
    agent = create_gated_agent(
        made, name="boss", model=_AsWritten(turns=[asked, AIMessage(content="done")]), tools=tools
    )
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=boss)
    [told] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert told.content == (
        "agentgate refused tool:other (invoke): the grant does not cover tool:other invoke: ask for a grant that covers it; "
        "[scope_creep/call_not_covered]. Do not retry this call; choose another way or stop."
    )
    made.flush()
    [refusal] = [e for e in made.audit.entries() if e.resource == "tool:other"]
    assert "(it holds tool:pay?api_key=sk-live-SECRET, model:scripted)" in refusal.reasons[0]


def test_a_model_call_no_capability_covers_is_not_told_what_the_grant_holds(tmp_path: Path) -> None:
    """Review R60, the answer that ends the run on a refused model call listed the grant too."""
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    text = POLICY.replace("ROOT", keys["root"].did).replace("BOSS", keys["boss"].did)
    text = text.replace("      - resource: model:scripted\n", "")
    made = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        boss = made.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        agent = create_gated_agent(made, name="boss", model=_AsWritten(turns=[AIMessage(content="hi")]))
        result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=boss)
        last = str(result["messages"][-1].content)
        assert "the grant does not cover model:scripted generate: ask for a grant that covers it;" in last
        assert "sk-live-" not in last and "it holds" not in last
    finally:
        made.close()
