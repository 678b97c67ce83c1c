"""Review R61: a refused delegation's text, which the supervisor's model is told (the LangGraph
``ask_NAME`` tool's failure) and which ``Gate.delegate`` raises, leaves out the list of every
capability the parent grant holds, as a refused call's leaves out ``(it holds ...)``
(``without_held``): that list pins, for an argument the framework injects (an API key), the value
it may be filled with. The finding and the audit entry keep it whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from agentgate.errors import ScopeCreep
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SECRET = "sk-live-SECRET123"

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
  lookup:
    args: {{id: {{type: string}}}}
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:db
        constraints: {{api_key: {{eq: "{secret}"}}}}
      - resource: model:scripted
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:lookup
        - resource: model:scripted
"""


@dataclass
class Desk:
    gate: Gate
    boss: AgentIdentity
    helper: SigningKey


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    """A supervisor whose grant pins ``api_key`` of ``tool:db`` and whose policy lets it hand on
    ``tool:lookup``, which its grant does not hold: the authority engine refuses the delegation
    ``capability_widened``."""
    keys = {n: SigningKey.generate() for n in ("root", "boss", "helper")}
    text = POLICY.format(secret=SECRET, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        yield Desk(gate, boss, keys["helper"])
    finally:
        gate.close()


def test_a_refused_delegation_raises_without_what_the_parent_holds(desk: Desk) -> None:
    """Review R61: ``Gate.delegate`` raised ``ScopeCreep`` quoting ``(parent holds
    tool:db?api_key=sk-live-...)``; its text now names what was refused and not what is held,
    while its finding and its audit entry keep the whole message."""
    with pytest.raises(ScopeCreep) as refused:
        desk.gate.delegate(
            desk.boss, name="helper", key=desk.helper, capabilities=["tool:lookup"], ttl=timedelta(minutes=1)
        )
    told = str(refused.value)
    assert told.startswith("capability_widened: child capability tool:lookup allows tool:lookup invoke")
    assert SECRET not in told and "holds tool:db" not in told
    finding = refused.value.finding
    assert finding is not None and finding.code == "capability_widened" and SECRET in finding.message
    index = refused.value.audit_index
    assert index is not None
    entry = json.loads(desk.gate.audit.entry_bytes(index))
    assert entry["kind"] == "deny" and any(SECRET in reason for reason in entry["reasons"])


def test_the_supervisors_model_is_not_told_what_the_parent_holds(desk: Desk) -> None:
    """Review R61: the supervisor's model, whose ``ask_helper`` call was refused, was told the
    parent's every capability, the pinned API key included (``_failure`` quotes the error)."""
    helper = create_gated_agent(
        desk.gate, name="helper", model=ScriptedChatModel(turns=[AIMessage(content="helped")]), tools=[]
    )
    ask = delegation_tool(
        desk.gate,
        name="helper",
        agent=helper,
        key=desk.helper,
        capabilities=["tool:lookup", "model:scripted"],
        ttl=timedelta(minutes=5),
    )
    asked = AIMessage(content="", tool_calls=[{"name": "ask_helper", "args": {"task": "t"}, "id": "c1"}])
    boss = create_gated_agent(
        desk.gate,
        name="boss",
        model=ScriptedChatModel(turns=[asked, AIMessage(content="done")]),
        tools=[ask],
    )
    result = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=desk.boss)
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    told = str(answer.content)
    assert "capability_widened" in told and answer.status == "error"
    assert SECRET not in told and "holds tool:db" not in told
