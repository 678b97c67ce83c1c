"""Review R85: a sub-agent's budget took ``usd_micros`` whenever its parent's grant carried no
budget, whatever the unit of the policy's delegation rule: under a rule of ``{limit: 10, unit:
calls}``, ``Gate.delegate(bot, ..., budget=5)`` made a grant of 5 micro-dollars, which a tool call
never charges, so the sub-agent's tool calls ran without limit. Nor did the rule's check
(``PolicyIndex.delegation_fault``, asked by ``Gate.delegate`` and of each link at every decision)
compare units: 5 ``usd_micros`` passed a rule of 10 ``calls``.

Now the sub-agent's budget is in its parent's unit, else in the rule's; a delegated budget in
another unit than the rule's is over it (``delegation_budget_above_policy``, its message naming
both units), refused by ``Gate.delegate`` (``ScopeCreep``, audited) and at every call on a chain
made outside the Gate.

Real components: a Gate over a SQLite store, a chain signed with the library's ``delegate``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.authority import Budget, delegate
from agentgate.capabilities import Call
from agentgate.errors import ScopeCreep
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


def _policy(keys: dict[str, SigningKey], role_budget: str, rule_unit: str = "calls") -> str:
    return f"""
version: 1
trust_anchors: {{root: {{did: "{keys["root"].did}"}}}}
principals:
  bot: {{kind: agent, did: "{keys["bot"].did}", roles: [worker]}}
tools:
  lookup: {{args: {{id: {{type: string}}}}, idempotent: true}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: "tool:lookup"}}]
    {role_budget}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 300
      budget: {{limit: 10, unit: {rule_unit}}}
      capabilities: [{{resource: "tool:lookup"}}]
"""


@dataclass
class Rig:
    gate: Gate
    keys: dict[str, SigningKey]
    bot: AgentIdentity


def _rig(path: Path, role_budget: str = "") -> Rig:
    keys = {n: SigningKey.generate() for n in ("root", "bot", "kid")}
    gate = Gate(parse_policy(_policy(keys, role_budget), source="p.yaml"), SQLiteStore(path / "a.db"))
    return Rig(gate, keys, gate.issue(keys["root"], name="bot", key=keys["bot"], role="worker"))


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = _rig(tmp_path)
    yield made
    made.gate.close()


def _lookup(i: int) -> Call:
    return Call.tool("lookup", {"id": str(i)})


def test_a_sub_agent_of_a_parent_with_no_budget_gets_the_rules_unit_and_is_limited(rig: Rig) -> None:
    assert rig.bot.chain.tip.budget is None
    kid = rig.gate.delegate(
        rig.bot,
        name="kid",
        key=rig.keys["kid"],
        capabilities=["tool:lookup"],
        ttl=timedelta(minutes=5),
        budget=5,
    )
    assert kid.chain.tip.budget == Budget(5, "calls")
    for i in range(5):
        auth = rig.gate.authorize(kid, _lookup(i))
        assert auth.allowed, auth.reasons
        rig.gate.run(auth, lambda: "x")
    refused = rig.gate.authorize(kid, _lookup(5))
    assert not refused.allowed and refused.budget_exhausted
    assert refused.reasons[0].startswith("budget exhausted (5 of 5 calls spent")


def test_a_chain_delegated_outside_the_gate_in_another_unit_is_refused_naming_both(rig: Rig) -> None:
    def kid_with(unit: str) -> AgentIdentity:
        chain = delegate(
            rig.bot.chain,
            rig.keys["bot"],
            rig.keys["kid"].public,
            ["tool:lookup"],
            ttl=60,
            budget=Budget(5, unit),
        )
        return AgentIdentity(name="kid", key=rig.keys["kid"], chain=chain)

    auth = rig.gate.authorize(kid_with("usd_micros"), _lookup(0))
    assert not auth.allowed
    (finding,) = auth.findings
    assert finding.code == "delegation_budget_above_policy"
    assert "may carry a budget of 10 calls at most, not 5 usd_micros, another unit" in finding.message
    assert rig.gate.authorize(kid_with("calls"), _lookup(0)).allowed


def test_a_parent_whose_budget_is_in_another_unit_than_the_rules_delegates_none(tmp_path: Path) -> None:
    rig = _rig(tmp_path, role_budget="budget: {limit: 1000, unit: usd_micros}")
    try:
        before = rig.gate.audit.size()
        with pytest.raises(ScopeCreep, match="not 5 usd_micros, another unit") as refused:
            rig.gate.delegate(
                rig.bot,
                name="kid",
                key=rig.keys["kid"],
                capabilities=["tool:lookup"],
                ttl=timedelta(minutes=5),
                budget=5,
            )
        assert refused.value.finding is not None
        assert refused.value.finding.code == "delegation_budget_above_policy"
        assert "10 calls" in str(refused.value)
        rig.gate.flush()
        assert rig.gate.audit.size() == before + 1  # the refusal is audited
        assert list(rig.gate.audit.entries())[-1].kind == "deny"
    finally:
        rig.gate.close()
