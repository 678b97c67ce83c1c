"""The policy at decision and at issue time, the leftovers of review R57 (review R58):

- a root grant made outside the Gate is held to its holder's role's ``budget`` as to its ``ttl_s``
  (``scope_creep`` ``root_budget_above_policy``): until then a grant of 5,000 calls to a principal
  whose role allows 1,000 (library ``issue``, ``agentgate grant issue`` without ``--policy``) was
  allowed.

Real components: a Gate over a SQLite store, chains signed with the library's ``issue`` and
``delegate``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import Budget, Chain, delegate, issue, parse_chain
from agentgate.capabilities import Call
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

NAMES = ("root", "sup", "clerk")


def _policy(keys: dict[str, SigningKey]) -> str:
    return f"""
version: 1
settings: {{max_ttl_s: 86400}}
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  sup: {{kind: agent, did: "{keys["sup"].did}", roles: [sup]}}
  clerk: {{kind: agent, did: "{keys["clerk"].did}", roles: [clerk]}}
tools:
  lookup: {{args: {{id: {{type: string}}}}}}
  refund: {{args: {{amount: {{type: integer}}}}}}
roles:
  sup:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: tool:refund}}]
    budget: {{limit: 1000, unit: calls}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      budget: {{limit: 100, unit: calls}}
      capabilities: [{{resource: tool:lookup}}]
  clerk:
    kind: agent
    capabilities: [{{resource: tool:lookup}}]
    ttl_s: 3600
"""


@dataclass
class Rig:
    gate: Gate
    keys: dict[str, SigningKey]
    sup: AgentIdentity


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    keys = {name: SigningKey.generate() for name in NAMES}
    gate = Gate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(tmp_path / "s.db"))
    try:
        yield Rig(gate, keys, gate.issue(keys["root"], name="sup", key=keys["sup"], role="sup"))
    finally:
        gate.close()


LOOKUP = Call.tool("lookup", {"id": "a"})
REFUND = Call.tool("refund", {"amount": 5})


def _holder(key: SigningKey, chain: Chain, name: str = "sup") -> AgentIdentity:
    return AgentIdentity(name=name, key=key, chain=chain)


def _entry_reasons(rig: Rig, index: int | None) -> list[str]:
    assert index is not None
    rig.gate.flush()
    return list(next(e for e in rig.gate.audit.entries() if e.index == index).reasons)


def _grants_to(rig: Rig, did: str) -> int:
    """How many grants to ``did`` the Gate's store records."""
    rows = rig.gate.store.query("SELECT count(*) FROM agentgate_grants WHERE audience = ?", (did,))
    return int(rows[0][0])


def _refused_with(rig: Rig, auth: Authorization, kind: str, code: str) -> Finding:
    """``auth`` is a deny whose one finding is ``kind``/``code``, recorded as a deny entry."""
    assert auth.verdict == "deny", auth.explain()
    assert [(f.kind.value, f.code) for f in auth.findings] == [(kind, code)]
    assert any(code in reason for reason in _entry_reasons(rig, auth.audit_index))
    return auth.findings[0]


def _sup_root(rig: Rig, **terms: Any) -> Chain:
    """A root grant to sup signed by the trust anchor with the library's ``issue``, not ``Gate.issue``."""
    return issue(rig.keys["root"], rig.keys["sup"].public, ["tool:lookup", "tool:refund"], **terms)


def _forged(chain: Chain, other: Chain) -> Chain:
    """``chain`` (one link) carrying ``other``'s signature: it parses, its signature does not verify."""
    head = chain.token.rpartition(".")[0]
    return parse_chain(head + "." + other.token.rpartition(".")[2])


# 1. A root grant's budget is held to its holder's role, as its lifetime is.


@pytest.mark.parametrize(
    ("budget", "shown"),
    [
        (Budget(5000, "calls"), "a budget of 5000 calls"),
        (Budget(1000, "usd_micros"), "a budget of 1000 usd_micros"),
        (None, "no budget"),
    ],
    ids=["above_the_limit", "another_unit", "no_budget"],
)
def test_a_root_grant_issued_outside_the_gate_beyond_the_role_budget_is_denied(
    rig: Rig, budget: Budget | None, shown: str
) -> None:
    """Review R58: a root grant with more budget than its role's (issued without --policy) was allowed."""
    chain = _sup_root(rig, ttl=600, budget=budget)
    finding = _refused_with(
        rig,
        rig.gate.authorize(_holder(rig.keys["sup"], chain), REFUND),
        "scope_creep",
        "root_budget_above_policy",
    )
    assert shown in finding.message and "1000 calls" in finding.message
    assert finding.grant == chain.root.id and finding.field == "budget"
    # Every delegation below it is refused too, for its root.
    helper = SigningKey.generate()
    below = delegate(chain, rig.keys["sup"], helper.public, ["tool:lookup"], ttl=30)
    auth = rig.gate.authorize(_holder(helper, below, "helper"), LOOKUP)
    _refused_with(rig, auth, "scope_creep", "root_budget_above_policy")


def test_a_root_grant_within_the_role_budget_is_allowed_and_a_role_without_one_bounds_none(rig: Rig) -> None:
    for amount in (1000, 10):
        chain = _sup_root(rig, ttl=600, budget=Budget(amount, "calls"))
        assert rig.gate.authorize(_holder(rig.keys["sup"], chain), REFUND).allowed
    # The clerk's role has no budget: a grant carrying any, or none, is within it.
    for budget in (None, Budget(10**9, "tokens")):
        chain = issue(rig.keys["root"], rig.keys["clerk"].public, ["tool:lookup"], ttl=600, budget=budget)
        assert rig.gate.authorize(_holder(rig.keys["clerk"], chain, "clerk"), LOOKUP).allowed


def test_a_root_grant_wider_than_the_role_is_refused_by_the_policys_verdict(rig: Rig) -> None:
    """Review R58 (checked, already so): a root grant with capabilities the role does not hold
    (tool:refund to the clerk) is refused at the call: the policy's verdict reads the holder's
    role's rules, never the grant's capabilities, so a wider grant adds nothing."""
    chain = issue(rig.keys["root"], rig.keys["clerk"].public, ["tool:*"], ttl=600)
    clerk = _holder(rig.keys["clerk"], chain, "clerk")
    refused = rig.gate.authorize(clerk, REFUND)
    assert refused.verdict == "deny" and "no rule" in " ".join(refused.reasons)
    assert rig.gate.authorize(clerk, LOOKUP).allowed
