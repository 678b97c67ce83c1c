"""Review R61: a refused delegation's text, which the supervisor's model is told through the
``ask_NAME`` tool's failure, quoted the capabilities the delegation declares (and, for a chain
made outside the Gate, the link the policy refuses) with their constraints' operands: a sub-agent
pinned to one API key (``tool:db?api_key=sk-...``) told the supervisor's model the key. The model
is told each constrained argument's name with its operand hidden; the finding and the audit entry
keep the text whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SECRET = "sk-live-SECRET456"

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
tools:
  db:
    args:
      q: {{type: string, required: true}}
      api_key: {{type: string}}
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:db
      - resource: model:scripted
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:db
        - resource: model:scripted
"""


@dataclass
class Desk:
    gate: Gate
    boss: AgentIdentity
    helper: SigningKey


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    keys = {n: SigningKey.generate() for n in ("root", "boss", "helper")}
    text = POLICY.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        yield Desk(gate, boss, keys["helper"])
    finally:
        gate.close()


def test_the_supervisors_model_is_not_told_the_operands_a_refused_delegation_declares(desk: Desk) -> None:
    """Review R61: a delegation declared for longer than the policy's delegation rule allows is
    refused ``delegation_ttl_above_policy``, whose text quoted ``tool:db?api_key=sk-live-...``."""
    helper = create_gated_agent(
        desk.gate, name="helper", model=ScriptedChatModel(turns=[AIMessage(content="helped")]), tools=[]
    )
    ask = delegation_tool(
        desk.gate,
        name="helper",
        agent=helper,
        key=desk.helper,
        capabilities=[f"tool:db?api_key={SECRET}", "model:scripted"],
        ttl=timedelta(hours=1),
    )
    asked = AIMessage(content="", tool_calls=[{"name": "ask_helper", "args": {"task": "t"}, "id": "c1"}])
    boss = create_gated_agent(
        desk.gate, name="boss", model=ScriptedChatModel(turns=[asked, AIMessage(content="done")]), tools=[ask]
    )
    result = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=desk.boss)
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    told = str(answer.content)
    assert answer.status == "error" and "delegation_ttl_above_policy" in told
    assert SECRET not in told
    assert "api_key=<not shown" in told  # the model is told which argument is pinned, not to what
    # The audit log keeps the refusal whole.
    entries = [json.loads(desk.gate.audit.entry_bytes(i)) for i in range(desk.gate.audit.size())]
    assert any(SECRET in reason for e in entries if e["kind"] == "deny" for reason in e["reasons"])
