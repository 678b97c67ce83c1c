"""Review R82: a delegation wider than the policy's delegation rule lets the supervisor hand on is
refused ``delegation_wider_than_policy``, whose text lists what the policy lets it hand on, with
the operands of that rule's constraints (``tool:db?api_key=sk-live-...``); the supervisor's model
was told them, as only the arguments that the declared and held capabilities constrain were
hidden. Now the arguments the policy's delegation rules constrain are named with their operands
hidden too (and the capability after one keeps its comma); the audit entry keeps the text whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from test_langgraph_r61_delegation_operands import POLICY as R61_POLICY

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SECRET = "sk-live-POLICYSECRET"

POLICY = R61_POLICY.replace(
    "        - resource: tool:db\n        - resource: model:scripted\n",
    '        - resource: tool:db\n          constraints: {{api_key: {{eq: "{secret}"}}}}\n'
    "        - resource: model:scripted\n",
)
"""Review R61's policy, its delegation rule pinning ``api_key`` to a secret."""


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity, SigningKey]]:
    keys = {n: SigningKey.generate() for n in ("root", "boss", "helper")}
    text = POLICY.format(secret=SECRET, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        yield gate, boss, keys["helper"]
    finally:
        gate.close()


def test_the_supervisors_model_is_not_told_the_operands_the_policys_delegation_rule_pins(
    desk: tuple[Gate, AgentIdentity, SigningKey],
) -> None:
    gate, boss_identity, helper_key = desk
    helper = create_gated_agent(
        gate, name="helper", model=ScriptedChatModel(turns=[AIMessage(content="helped")]), tools=[]
    )
    ask = delegation_tool(
        gate,
        name="helper",
        agent=helper,
        key=helper_key,
        capabilities=["tool:db"],  # wider than the policy's tool:db?api_key=...
        ttl=timedelta(minutes=5),
    )
    asked = AIMessage(content="", tool_calls=[{"name": "ask_helper", "args": {"task": "t"}, "id": "c1"}])
    boss = create_gated_agent(
        gate, name="boss", model=ScriptedChatModel(turns=[asked, AIMessage(content="done")]), tools=[ask]
    )
    result = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=boss_identity)
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    told = str(answer.content)
    assert answer.status == "error" and "delegation_wider_than_policy" in told
    assert SECRET not in told
    assert "hand on: tool:db?api_key=<not shown to the model>, model:scripted, or narrower" in told
    # The audit log keeps the refusal whole.
    entries = [json.loads(gate.audit.entry_bytes(i)) for i in range(gate.audit.size())]
    assert any(SECRET in reason for e in entries if e["kind"] == "deny" for reason in e["reasons"])
