"""The policy at decision and at issue time, the four leftovers of review R57 (review R58):

- a root grant made outside the Gate is held to its holder's role's ``budget`` as to its ``ttl_s``
  (``scope_creep`` ``root_budget_above_policy``): until then a grant of 5,000 calls to a principal
  whose role allows 1,000 (library ``issue``, ``agentgate grant issue`` without ``--policy``) was
  allowed;
- ``Gate.issue`` refuses a role its principal does not hold (``ScopeCreep``, ``role_not_held``):
  until then it issued a grant every call on which was refused;
- ``Gate.authorize`` verifies the chain before it holds it to the policy, as the gateway does: a
  forged chain that also breaks the policy was refused with the policy's code, not
  ``bad_signature``;
- ``Gate.delegate`` refuses to hand on from a chain the policy refuses, with its finding: until
  then it delegated, and every call of the sub-agent was then refused.

Real components: a Gate over a SQLite store, chains signed with the library's ``issue`` and
``delegate``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

# The policy (a supervisor that may delegate lookups only, a clerk) and the Gate over it, as R57 wrote them.
from test_gate_r57_policy_chain import LOOKUP, NAMES, REFUND, Rig, _policy

from agentgate.authority import Budget, Chain, delegate, issue, parse_chain
from agentgate.authority import _decision as decision_module
from agentgate.errors import ScopeCreep
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    keys = {name: SigningKey.generate() for name in NAMES}
    with Gate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        yield Rig(gate, keys, gate.issue(keys["root"], name="sup", key=keys["sup"], role="sup"))


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


# 2. Gate.issue refuses a role its principal does not hold.


def test_gate_issue_refuses_a_role_the_principal_does_not_hold(rig: Rig) -> None:
    """Review R58: Gate.issue gave the clerk a grant for role sup, every call on which was refused."""
    before = len(list(rig.gate.audit.entries()))
    with pytest.raises(ScopeCreep) as refused:
        rig.gate.issue(rig.keys["root"], name="clerk", key=rig.keys["clerk"], role="sup")
    message = str(refused.value)
    assert "principal clerk does not hold role sup" in message and "its roles: clerk" in message
    finding = refused.value.finding
    assert isinstance(finding, Finding) and (finding.kind.value, finding.code) == (
        "scope_creep",
        "role_not_held",
    )
    reasons = _entry_reasons(rig, refused.value.audit_index)
    assert "scope_creep:role_not_held" in reasons
    entries = list(rig.gate.audit.entries())
    assert len(entries) == before + 1 and entries[-1].kind == "deny"
    assert _grants_to(rig, rig.keys["clerk"].did) == 0
    # A key the policy does not name holds no role at all.
    stranger = SigningKey.generate()
    with pytest.raises(ScopeCreep, match="is not a principal of this policy") as unnamed:
        rig.gate.issue(rig.keys["root"], name="stranger", key=stranger, role="clerk")
    assert unnamed.value.finding is not None and unnamed.value.finding.code == "role_not_held"
    # The role it holds is issued as before.
    clerk = rig.gate.issue(rig.keys["root"], name="clerk", key=rig.keys["clerk"], role="clerk")
    assert rig.gate.authorize(clerk, LOOKUP).allowed


def test_gate_issue_refuses_an_inherited_role_whose_grant_the_policy_refuses(tmp_path: Path) -> None:
    """Review R58: a principal holding role senior (ttl_s 60), which inherits clerk (ttl_s 3600),
    was issued a grant for clerk living 3600 s, every call on which was refused
    root_ttl_above_policy (the policy bounds a root grant by the roles its holder holds)."""
    keys = {name: SigningKey.generate() for name in ("root", "senior")}
    text = f"""
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  senior: {{kind: human, did: "{keys["senior"].did}", roles: [senior]}}
tools:
  lookup: {{args: {{id: {{type: string}}}}}}
roles:
  clerk: {{kind: human, capabilities: [{{resource: tool:lookup}}], ttl_s: 3600}}
  senior: {{kind: human, inherits: [clerk], ttl_s: 60}}
"""
    with Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        with pytest.raises(ScopeCreep, match="a grant for role clerk to s is outside the policy") as refused:
            gate.issue(keys["root"], name="s", key=keys["senior"], role="clerk")
        assert refused.value.finding is not None and refused.value.finding.code == "root_ttl_above_policy"
        assert refused.value.audit_index is not None
        senior = gate.issue(keys["root"], name="s", key=keys["senior"], role="senior")
        assert gate.authorize(senior, LOOKUP).allowed


# 3. The chain's signatures are verified before the policy's checks, as at the gateway.


def test_a_forged_chain_that_also_breaks_the_policy_is_refused_bad_signature(rig: Rig) -> None:
    """Review R58: Gate.authorize reported a forged chain beyond the policy's TTL as
    root_ttl_above_policy, where the gateway (which verifies first) says bad_signature."""
    long = _sup_root(rig, ttl=10 * 86400, budget=Budget(1000, "calls"))
    forged = _forged(long, _sup_root(rig, ttl=60))
    assert forged.ids == long.ids
    auth = rig.gate.authorize(_holder(rig.keys["sup"], forged), REFUND)
    _refused_with(rig, auth, "authority_chain_opacity", "bad_signature")
    # A call the policy's verdict refuses (no rule of the clerk's role names tool:refund) on a
    # forged chain is refused for the forgery too.
    clerk_chain = issue(rig.keys["root"], rig.keys["clerk"].public, ["tool:*"], ttl=600)
    forged_clerk = _forged(clerk_chain, _sup_root(rig, ttl=60))
    auth = rig.gate.authorize(_holder(rig.keys["clerk"], forged_clerk, "clerk"), REFUND)
    _refused_with(rig, auth, "authority_chain_opacity", "bad_signature")
    # Unforged, each is refused with the policy's reason, as before.
    auth = rig.gate.authorize(_holder(rig.keys["sup"], long), REFUND)
    _refused_with(rig, auth, "non_revocable_grant", "root_ttl_above_policy")
    refused = rig.gate.authorize(_holder(rig.keys["clerk"], clerk_chain, "clerk"), REFUND)
    assert refused.verdict == "deny" and refused.findings == () and "no rule" in " ".join(refused.reasons)


def test_verifying_first_costs_an_allowed_or_repeated_call_no_signature_check(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: the chain is verified before the policy's checks only for a call the policy
    refuses, and once per chain (the authority engine's cache): an allowed call's path is as before.
    Counted where the engine verifies (since review R59 the Gate asks the engine itself of a call
    the policy refuses): an allowed chain once, at its first call, a refused one once too."""
    checked: list[str] = []
    real = decision_module.chain_finding

    def counted(chain: Chain, anchors: Any) -> Finding | None:
        checked.append(chain.id)
        return real(chain, anchors)

    monkeypatch.setattr(decision_module, "chain_finding", counted)
    for _ in range(3):
        assert rig.gate.authorize(rig.sup, LOOKUP).allowed
    assert checked == [rig.sup.chain.id]
    long = _holder(rig.keys["sup"], _sup_root(rig, ttl=10 * 86400, budget=Budget(1000, "calls")))
    for _ in range(3):
        _refused_with(rig, rig.gate.authorize(long, REFUND), "non_revocable_grant", "root_ttl_above_policy")
    assert checked == [rig.sup.chain.id, long.chain.id]


# 4. Gate.delegate hands nothing on from a chain the policy refuses.


@pytest.mark.parametrize(
    ("terms", "kind", "code"),
    [
        (
            {"ttl": 10 * 86400, "budget": Budget(1000, "calls")},
            "non_revocable_grant",
            "root_ttl_above_policy",
        ),
        ({"ttl": 600, "budget": Budget(5000, "calls")}, "scope_creep", "root_budget_above_policy"),
    ],
    ids=["ttl", "budget"],
)
def test_gate_delegate_refuses_to_hand_on_from_a_chain_outside_the_policy(
    rig: Rig, terms: dict[str, Any], kind: str, code: str
) -> None:
    """Review R58: Gate.delegate from a root grant outside the policy succeeded; the sub-agent's
    every call was then refused."""
    parent = _holder(rig.keys["sup"], _sup_root(rig, **terms))
    helper = SigningKey.generate()
    with pytest.raises(ScopeCreep) as refused:
        rig.gate.delegate(
            parent,
            name="helper",
            key=helper,
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=30),
            budget=10,
        )
    finding = refused.value.finding
    assert isinstance(finding, Finding) and (finding.kind.value, finding.code) == (kind, code)
    assert "sup's chain is outside the policy" in str(refused.value)
    assert f"{kind}:{code}" in _entry_reasons(rig, refused.value.audit_index)
    assert _grants_to(rig, helper.did) == 0
    assert all(d[1].key is not helper for d in rig.gate.delegations)
    # From a chain within the policy, the same delegation is made and its calls allowed.
    made = rig.gate.delegate(
        rig.sup, name="helper", key=helper, capabilities=["tool:lookup"], ttl=timedelta(seconds=30), budget=10
    )
    assert rig.gate.authorize(made, LOOKUP).allowed
