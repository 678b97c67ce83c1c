"""Review R85b: where a parent with no budget holds two roles whose delegation rules bound a
budget in different units, ``Gate.delegate`` took the unit of the first rule with a budget in
the order the principal lists its roles (``PolicyIndex.delegation_budget_unit``), admitting or
not: holding ``[a, b]``, whose rules allow 10 ``calls`` and 1000 ``usd_micros``, ``budget=500``
became 500 ``calls`` and was refused ``ScopeCreep``, while a chain carrying 500 ``usd_micros``
made outside the Gate was allowed at every call; holding ``[b, a]``, it passed.

Now the unit is that of the first rule, in the order the policy declares its roles, that admits
the grant in it, as the decision on the chain reads it; where none admits it, it is refused
naming the limit. Capabilities that only rules in units sharing none hand on are refused
together, by ``Gate.delegate`` and at every call, naming both units.

Real components: a Gate over a SQLite store, chains signed with the library's ``delegate``."""

from __future__ import annotations

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


def _policy(keys: dict[str, SigningKey], held: str, a_hands: str, b_hands: str) -> str:
    return f"""
version: 1
trust_anchors: {{root: {{did: "{keys["root"].did}"}}}}
principals:
  bot: {{kind: agent, did: "{keys["bot"].did}", roles: [{held}]}}
tools:
  lookup: {{args: {{id: {{type: string}}}}, idempotent: true}}
  fetch: {{args: {{id: {{type: string}}}}, idempotent: true}}
roles:
  a:
    kind: agent
    capabilities: [{{resource: "tool:lookup"}}, {{resource: "tool:fetch"}}]
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 300
      budget: {{limit: 10, unit: calls}}
      capabilities: [{a_hands}]
  b:
    kind: agent
    capabilities: [{{resource: "tool:lookup"}}, {{resource: "tool:fetch"}}]
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 300
      budget: {{limit: 1000, unit: usd_micros}}
      capabilities: [{b_hands}]
"""


_LOOKUP = '{resource: "tool:lookup"}'
_FETCH = '{resource: "tool:fetch"}'


def _gate(
    tmp_path: Path, held: str, a_hands: str = _LOOKUP, b_hands: str = _LOOKUP
) -> tuple[Gate, dict[str, SigningKey], AgentIdentity]:
    keys = {n: SigningKey.generate() for n in ("root", "bot", "kid")}
    policy = parse_policy(_policy(keys, held, a_hands, b_hands), source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "a.db"))
    return gate, keys, gate.issue(keys["root"], name="bot", key=keys["bot"], role="b")


def _delegated(
    gate: Gate, keys: dict[str, SigningKey], bot: AgentIdentity, budget: int, caps: list[str] | None = None
) -> AgentIdentity:
    return gate.delegate(
        bot,
        name="kid",
        key=keys["kid"],
        capabilities=caps or ["tool:lookup"],
        ttl=timedelta(minutes=5),
        budget=budget,
    )


@pytest.mark.parametrize("held", ["a, b", "b, a"])
def test_a_budget_only_the_second_units_rule_admits_takes_that_unit_whatever_the_roles_order(
    tmp_path: Path, held: str
) -> None:
    gate, keys, bot = _gate(tmp_path, held)
    try:
        assert bot.chain.tip.budget is None
        kid = _delegated(gate, keys, bot, 500)
        assert kid.chain.tip.budget == Budget(500, "usd_micros")
        assert gate.authorize(kid, Call.tool("lookup", {"id": "1"})).allowed
    finally:
        gate.close()


@pytest.mark.parametrize("held", ["a, b", "b, a"])
def test_a_budget_both_rules_admit_takes_the_unit_of_the_role_the_policy_declares_first(
    tmp_path: Path, held: str
) -> None:
    gate, keys, bot = _gate(tmp_path, held)
    try:
        kid = _delegated(gate, keys, bot, 5)
        assert kid.chain.tip.budget == Budget(5, "calls")
        assert gate.authorize(kid, Call.tool("lookup", {"id": "1"})).allowed
    finally:
        gate.close()


def test_a_budget_no_rule_admits_is_refused_naming_a_limit(tmp_path: Path) -> None:
    gate, keys, bot = _gate(tmp_path, "a, b")
    try:
        with pytest.raises(ScopeCreep, match="delegate it with a budget of at most 10 calls") as refused:
            _delegated(gate, keys, bot, 5000)
        assert refused.value.finding is not None
        assert refused.value.finding.code == "delegation_budget_above_policy"
    finally:
        gate.close()


def test_capabilities_rules_bound_in_units_sharing_none_are_refused_together_naming_both(
    tmp_path: Path,
) -> None:
    gate, keys, bot = _gate(tmp_path, "a, b", a_hands=_LOOKUP, b_hands=_FETCH)
    try:
        split = "in calls and of one with tool:fetch in usd_micros, and a grant carries one budget"
        with pytest.raises(ScopeCreep, match=split) as refused:
            _delegated(gate, keys, bot, 5, ["tool:lookup", "tool:fetch"])
        assert refused.value.finding is not None
        assert refused.value.finding.code == "delegation_budget_above_policy"
        assert "delegate them in separate grants" in str(refused.value)
        # The decision on a chain made outside the Gate refuses it alike, in either unit.
        for unit in ("calls", "usd_micros"):
            chain = delegate(
                bot.chain,
                keys["bot"],
                keys["kid"].public,
                ["tool:lookup", "tool:fetch"],
                ttl=60,
                budget=Budget(5, unit),
            )
            kid = AgentIdentity(name="kid", key=keys["kid"], chain=chain)
            auth = gate.authorize(kid, Call.tool("lookup", {"id": "1"}))
            assert not auth.allowed
            (finding,) = auth.findings
            assert finding.code == "delegation_budget_above_policy"
            assert split in finding.message
        # Each on its own, in its rule's unit, is handed on.
        alone = _delegated(gate, keys, bot, 5, ["tool:fetch"])
        assert alone.chain.tip.budget == Budget(5, "usd_micros")
    finally:
        gate.close()
