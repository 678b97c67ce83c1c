"""A ``delegation_tool`` whose ``ttl`` is above the policy's ``max_ttl_s`` is refused
``delegation_ttl_above_policy``; the text the supervisor's model is told named, as the TTL asked,
the TTL capped to the parent grant's remaining life. It now names the TTL asked, the policy's
maximum and the parent's remaining life, each as it is."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
import test_langgraph_r61_delegation_operands
from langchain_core.messages import AIMessage, ToolMessage
from test_langgraph_r61_delegation_operands import Desk

from agentgate.errors import ScopeCreep
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

desk = test_langgraph_r61_delegation_operands.desk  # the fixture, shared: the same policy and keys


def _parent_left_within(desk: Desk, told: str, before: int) -> None:
    """``told`` names the parent's remaining life as it was when the delegation was refused."""
    found = re.search(r"its parent's grant has (\d+)s left", told)
    assert found is not None, told
    after = desk.boss.chain.tip.expires - int(time.time())
    assert after <= int(found.group(1)) <= before


def test_the_supervisors_model_is_told_the_ttl_asked_not_the_ttl_capped_to_the_parent(desk: Desk) -> None:
    """Review R67: a delegation asked for 7200s under a policy maximum of 600s, by a parent with
    about 3600s left, was refused "may live 600s at most, not 3600s": 3600s was never asked."""
    helper = create_gated_agent(
        desk.gate, name="helper", model=ScriptedChatModel(turns=[AIMessage(content="helped")]), tools=[]
    )
    ask = delegation_tool(
        desk.gate,
        name="helper",
        agent=helper,
        key=desk.helper,
        capabilities=["tool:db", "model:scripted"],
        ttl=timedelta(hours=2),
    )
    asked = AIMessage(content="", tool_calls=[{"name": "ask_helper", "args": {"task": "t"}, "id": "c1"}])
    boss = create_gated_agent(
        desk.gate, name="boss", model=ScriptedChatModel(turns=[asked, AIMessage(content="done")]), tools=[ask]
    )
    before = desk.boss.chain.tip.expires - int(time.time())
    result = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=desk.boss)
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    told = str(answer.content)
    assert answer.status == "error" and "delegation_ttl_above_policy" in told
    assert "may live 600s at most, not 7200s" in told
    _parent_left_within(desk, told, before)
    assert "delegate it with a ttl of at most 600s" in told


def test_gate_delegate_names_the_ttl_asked_when_the_parent_lives_longer(desk: Desk) -> None:
    """Review R67: a TTL asked within the parent's life is named as asked, as before, and the
    parent's remaining life is not named where it capped nothing."""
    with pytest.raises(ScopeCreep) as refused:
        desk.gate.delegate(
            desk.boss, name="helper", key=desk.helper, capabilities=["tool:db"], ttl=timedelta(seconds=900)
        )
    assert "may live 600s at most, not 900s: delegate it with a ttl of at most 600s" in str(refused.value)
    assert "left" not in str(refused.value)


def test_gate_delegate_names_the_ttl_asked_and_the_parents_life_it_was_capped_to(desk: Desk) -> None:
    """Review R67: ``Gate.delegate`` itself (the text a finding and the audit entry keep)."""
    before = desk.boss.chain.tip.expires - int(time.time())
    with pytest.raises(ScopeCreep) as refused:
        desk.gate.delegate(
            desk.boss, name="helper", key=desk.helper, capabilities=["tool:db"], ttl=timedelta(days=1)
        )
    told = str(refused.value)
    assert "may live 600s at most, not 86400s" in told
    _parent_left_within(desk, told, before)
    assert refused.value.finding is not None and refused.value.finding.message in told
