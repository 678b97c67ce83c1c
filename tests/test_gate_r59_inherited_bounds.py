"""A root grant's lifetime and budget are bounded by the roles its holder holds itself, and that is
the set of roles the decision reads them from (review R59, checked, already so).

``PolicyIndex.root_ttl_s`` and ``root_budgets`` read only the roles a principal holds directly,
where ``evaluate`` reads the rules of the roles it inherits too. The policy language makes these
one rule: ``inherits`` brings another role's rules, never its ``budget``, ``ttl_s`` or
``delegation`` (docs/policy-reference.md; lint ``inherits_rules_not_budget``). A root grant for a
role carries that role's own terms (``role_grant_template``), and a decision allowed by an
inherited role's rule names the held role that brings it (``held_role``) and that role's budget.
So reading the held roles is reading the roles the decision uses: a principal holding ``senior``
(600 s, 1,000 calls), which inherits ``clerk`` (3,600 s, 5,000 calls), has its lookups allowed
by clerk's rule under senior's terms, and a root grant on clerk's terms refused; a principal
holding both directly may carry either.

Real components: a Gate over a SQLite store, chains signed with the library's ``issue``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import Budget, issue
from agentgate.capabilities import Call
from agentgate.errors import ScopeCreep
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import Outcome, parse_policy
from agentgate.store import SQLiteStore

LOOKUP = Call.tool("lookup", {"id": "a"})
NAMES = ("root", "senior", "both")


def _policy(keys: dict[str, SigningKey]) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  senior: {{kind: human, did: "{keys["senior"].did}", roles: [senior]}}
  both: {{kind: human, did: "{keys["both"].did}", roles: [senior, clerk]}}
tools:
  lookup: {{args: {{id: {{type: string}}}}}}
roles:
  clerk:
    kind: human
    capabilities: [{{resource: tool:lookup}}]
    budget: {{limit: 5000, unit: calls}}
    ttl_s: 3600
  senior:
    kind: human
    inherits: [clerk]
    budget: {{limit: 1000, unit: calls}}
    ttl_s: 600
"""


@dataclass
class Rig:
    gate: Gate
    keys: dict[str, SigningKey]

    def root(self, holder: str, **terms: Any) -> AgentIdentity:
        chain = issue(self.keys["root"], self.keys[holder].public, ["tool:lookup"], **terms)
        return AgentIdentity(name=holder, key=self.keys[holder], chain=chain)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    keys = {name: SigningKey.generate() for name in NAMES}
    with Gate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        yield Rig(gate, keys)


def test_the_decision_reads_the_budget_of_the_role_held_not_the_one_inherited(rig: Rig) -> None:
    """Review R59: the roles the root bounds read (held ones) are the roles the decision reads
    terms from: an allow by an inherited role's rule names the held role and its budget."""
    index = rig.gate.index
    verdict = index.evaluate(rig.keys["senior"].did, LOOKUP)
    assert verdict.outcome is Outcome.ALLOW and verdict.rule is not None
    assert verdict.rule.role == "clerk" and verdict.held_role == "senior"
    assert verdict.budget == rig.gate.policy.document.roles["senior"].budget
    assert index.roles_of(rig.keys["senior"].did) == ("senior", "clerk")  # the rules read
    assert index.root_ttl_s(rig.keys["senior"].did) == 600
    assert index.root_budgets(rig.keys["senior"].did) == (rig.gate.policy.document.roles["senior"].budget,)
    # For every principal, the held role a decision names is one of those the bounds read.
    for name, principal in rig.gate.policy.document.principals.items():
        assert index.evaluate(name, LOOKUP).held_role in principal.roles


@pytest.mark.parametrize(
    ("terms", "code"),
    [
        ({"ttl": 3600, "budget": Budget(1000, "calls")}, "root_ttl_above_policy"),
        ({"ttl": 600, "budget": Budget(5000, "calls")}, "root_budget_above_policy"),
    ],
    ids=["clerks_ttl", "clerks_budget"],
)
def test_a_root_grant_on_an_inherited_roles_terms_is_refused(
    rig: Rig, terms: dict[str, Any], code: str
) -> None:
    """Review R59 (already so): a grant on clerk's longer ttl_s or larger budget to a holder of senior is refused."""
    auth = rig.gate.authorize(rig.root("senior", **terms), LOOKUP)
    assert auth.verdict == "deny" and [f.code for f in auth.findings] == [code]
    with pytest.raises(ScopeCreep) as refused:
        rig.gate.issue(rig.keys["root"], name="s", key=rig.keys["senior"], role="clerk")
    assert refused.value.finding is not None and refused.value.finding.code == "root_ttl_above_policy"


def test_a_root_grant_on_the_held_roles_terms_is_allowed_by_the_inherited_rule(rig: Rig) -> None:
    assert rig.gate.authorize(rig.root("senior", ttl=600, budget=Budget(1000, "calls")), LOOKUP).allowed
    senior = rig.gate.issue(rig.keys["root"], name="s", key=rig.keys["senior"], role="senior")
    assert rig.gate.authorize(senior, LOOKUP).allowed


def test_a_principal_holding_both_roles_may_carry_either_roles_terms(rig: Rig) -> None:
    for terms in (
        {"ttl": 3600, "budget": Budget(5000, "calls")},
        {"ttl": 600, "budget": Budget(1000, "calls")},
    ):
        assert rig.gate.authorize(rig.root("both", **terms), LOOKUP).allowed
    clerk = rig.gate.issue(rig.keys["root"], name="b", key=rig.keys["both"], role="clerk")
    assert rig.gate.authorize(clerk, LOOKUP).allowed
