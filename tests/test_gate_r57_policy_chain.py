"""A chain made outside the Gate is held to the policy at decision time (review R57): the root
grant's lifetime against the holder's role (``ttl_s``, capped by ``settings.max_ttl_s``), and each
delegation below it against its delegator's ``delegation`` rule, with the codes ``Gate.delegate``
gives a new delegation (agentgate/gate/_policy_chain.py, ``PolicyIndex.delegation_fault``).

Until then only ``Gate.delegate`` asked the rule: a supervisor that may hand on only
``tool:lookup`` for 60 s signed ``delegate(chain, key, helper, ["tool:refund"], ttl=3000)`` itself
(or ran ``agentgate grant delegate``, which takes no policy) and the helper's refund was allowed
with no finding; a root grant issued for ten years by the trust anchor (``grant issue`` without
``--policy``) was allowed under a policy whose ``max_ttl_s`` is a day.

Real components: a Gate over a SQLite store, chains signed with the library's ``issue`` and
``delegate``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import Budget, Chain, delegate, issue
from agentgate.capabilities import Call
from agentgate.errors import ScopeCreep
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity, Authorization, Gate
from agentgate.gate import _policy_chain as policy_chain_module
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

    def as_holder(self, key: SigningKey, chain: Chain, name: str = "helper") -> AgentIdentity:
        return AgentIdentity(name=name, key=key, chain=chain)


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


def _refused_with(rig: Rig, auth: Authorization, kind: str, code: str) -> Finding:
    """``auth`` is a deny whose one finding is ``kind``/``code``, recorded as a deny entry."""
    assert auth.verdict == "deny", auth.explain()
    assert [(f.kind.value, f.code) for f in auth.findings] == [(kind, code)]
    assert auth.audit_index is not None
    rig.gate.flush()
    entry = next(e for e in rig.gate.audit.entries() if e.index == auth.audit_index)
    assert entry.kind == "deny" and any(code in reason for reason in entry.reasons)
    return auth.findings[0]


def _outside(rig: Rig, capabilities: list[str], **terms: Any) -> AgentIdentity:
    """A helper holding a grant that sup delegated itself (the library's ``delegate``), not
    through ``Gate.delegate``."""
    helper = SigningKey.generate()
    chain = delegate(rig.sup.chain, rig.keys["sup"], helper.public, capabilities, **terms)
    return rig.as_holder(helper, chain)


@pytest.mark.parametrize(
    ("capabilities", "terms", "call", "kind", "code"),
    [
        (["tool:refund"], {"ttl": 30}, REFUND, "scope_creep", "delegation_wider_than_policy"),
        (["tool:lookup"], {"ttl": 3000}, LOOKUP, "non_revocable_grant", "delegation_ttl_above_policy"),
        (
            ["tool:lookup"],
            {"ttl": 30, "budget": Budget(500, "calls")},
            LOOKUP,
            "scope_creep",
            "delegation_budget_above_policy",
        ),
    ],
    ids=["capability", "ttl", "budget"],
)
def test_a_delegation_made_outside_the_gate_beyond_the_delegation_rule_is_denied_with_its_code(
    rig: Rig, capabilities: list[str], terms: dict[str, Any], call: Call, kind: str, code: str
) -> None:
    """Review R57: a delegation signed outside Gate.delegate beyond the policy's rule was allowed."""
    helper = _outside(rig, capabilities, **terms)
    finding = _refused_with(rig, rig.gate.authorize(helper, call), kind, code)
    assert finding.grant == helper.chain.tip.id
    assert "link 1" in finding.message and "which sup delegated" in finding.message
    # Gate.delegate refuses the same terms with the same code: one rule, two places.
    seconds = timedelta(seconds=terms["ttl"])
    budget = terms["budget"].amount if "budget" in terms else None
    with pytest.raises(ScopeCreep) as refused:
        rig.gate.delegate(
            rig.sup,
            name="helper",
            key=SigningKey.generate(),
            capabilities=capabilities,
            ttl=seconds,
            budget=budget,
        )
    assert isinstance(refused.value.finding, Finding) and refused.value.finding.code == code


def test_a_principal_whose_roles_delegate_nothing_cannot_hand_on_outside_the_gate(rig: Rig) -> None:
    clerk = rig.gate.issue(rig.keys["root"], name="clerk", key=rig.keys["clerk"], role="clerk")
    helper = SigningKey.generate()
    # A root grant made outside the Gate with a depth the clerk's role does not have.
    chain = issue(rig.keys["root"], rig.keys["clerk"].public, ["tool:lookup"], ttl=600, max_depth=1)
    assert clerk.chain.root.max_depth == 0
    sub = delegate(chain, rig.keys["clerk"], helper.public, ["tool:lookup"], ttl=30)
    auth = rig.gate.authorize(rig.as_holder(helper, sub), LOOKUP)
    _refused_with(rig, auth, "scope_creep", "delegation_not_in_policy")


def test_a_chain_deeper_than_the_roles_max_depth_is_denied(rig: Rig) -> None:
    # The root grant (outside the Gate, within the role's TTL) allows two steps; sup's role one.
    root = issue(
        rig.keys["root"],
        rig.keys["sup"].public,
        ["tool:lookup"],
        ttl=600,
        budget=Budget(1000, "calls"),
        max_depth=2,
    )
    helper, sub = SigningKey.generate(), SigningKey.generate()
    one = delegate(root, rig.keys["sup"], helper.public, ["tool:lookup"], ttl=30, budget=Budget(100, "calls"))
    assert rig.gate.authorize(rig.as_holder(helper, one), LOOKUP).allowed
    two = delegate(one, helper, sub.public, ["tool:lookup"], ttl=20)
    finding = _refused_with(
        rig,
        rig.gate.authorize(rig.as_holder(sub, two), LOOKUP),
        "scope_creep",
        "delegation_wider_than_policy",
    )
    assert "step 2" in finding.message and finding.grant == two.tip.id


@pytest.mark.parametrize("ttl", [10 * 365 * 86400, 7200], ids=["above_max_ttl_s", "above_role_ttl_s"])
def test_a_root_grant_issued_outside_the_gate_beyond_the_policy_lifetime_is_denied(
    rig: Rig, ttl: int
) -> None:
    """Review R57: a root grant beyond the policy's TTL (issued without --policy) was allowed."""
    chain = issue(rig.keys["root"], rig.keys["sup"].public, ["tool:refund"], ttl=ttl)
    auth = rig.gate.authorize(rig.as_holder(rig.keys["sup"], chain, "sup"), REFUND)
    finding = _refused_with(rig, auth, "non_revocable_grant", "root_ttl_above_policy")
    assert f"lives {ttl}s" in finding.message and "3600s" in finding.message
    assert finding.grant == chain.root.id
    # Every delegation below it is refused too: the root is what cannot be taken back in time.
    helper = SigningKey.generate()
    below = delegate(chain, rig.keys["sup"], helper.public, ["tool:refund"], ttl=30)
    auth = rig.gate.authorize(rig.as_holder(helper, below), REFUND)
    _refused_with(rig, auth, "non_revocable_grant", "root_ttl_above_policy")


def test_chains_within_the_policy_are_allowed_wherever_they_were_made(rig: Rig) -> None:
    helper = SigningKey.generate()
    made = rig.gate.delegate(
        rig.sup,
        name="helper",
        key=helper,
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
        budget=100,
    )
    assert rig.gate.authorize(rig.sup, REFUND).allowed
    assert rig.gate.authorize(made, LOOKUP).allowed
    outside_root = issue(
        rig.keys["root"], rig.keys["sup"].public, ["tool:lookup"], ttl=3600, budget=Budget(1000, "calls")
    )
    assert rig.gate.authorize(rig.as_holder(rig.keys["sup"], outside_root, "sup"), LOOKUP).allowed
    outside = delegate(
        outside_root, rig.keys["sup"], helper.public, ["tool:lookup"], ttl=60, budget=Budget(100, "calls")
    )
    assert rig.gate.authorize(rig.as_holder(helper, outside), LOOKUP).allowed


def test_the_verdict_on_a_chain_is_computed_once_and_read_from_its_token(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R57: the check is cached per chain (a repeated call pays a lookup), and it reads the
    chain's token, never fields a hand-built Chain sets apart from it (which the authority engine,
    verifying the token, would not see)."""
    computed: list[str] = []
    real = policy_chain_module.chain_fault

    def counted(index: Any, chain: Chain) -> Finding | None:
        computed.append(chain.id)
        return real(index, chain)

    monkeypatch.setattr(policy_chain_module, "chain_fault", counted)
    outside = rig.as_holder(
        rig.keys["sup"],
        issue(
            rig.keys["root"], rig.keys["sup"].public, ["tool:lookup"], ttl=600, budget=Budget(1000, "calls")
        ),
        "sup",
    )
    for _ in range(3):
        assert rig.gate.authorize(outside, LOOKUP).allowed
    assert computed == [outside.chain.id]
    # Gate.issue computed sup's when it made the grant (review R58): its calls read it.
    for _ in range(3):
        assert rig.gate.authorize(rig.sup, LOOKUP).allowed
    assert computed == [outside.chain.id]
    long = issue(rig.keys["root"], rig.keys["sup"].public, ["tool:lookup"], ttl=10 * 86400)
    # The same token with a root whose fields claim a short life: the grant ids are the token's.
    short_root = dataclasses.replace(long.root, expires=long.root.not_before + 60)
    disguised = Chain((short_root,), long.token)
    assert disguised.ids == long.ids
    auth = rig.gate.authorize(rig.as_holder(rig.keys["sup"], disguised, "sup"), LOOKUP)
    _refused_with(rig, auth, "non_revocable_grant", "root_ttl_above_policy")


def test_the_cache_of_verdicts_is_bounded(rig: Rig) -> None:
    chains = policy_chain_module.PolicyChains(rig.gate.index, size=2)
    made = [
        issue(rig.keys["root"], rig.keys["sup"].public, ["tool:lookup"], ttl=60, budget=Budget(1000, "calls"))
        for _ in range(5)
    ]
    for chain in made:
        assert chains.fault(chain) is None
    assert len(chains._faults) <= 2


def test_the_cache_of_verdicts_is_bounded_in_the_characters_of_its_keys(rig: Rig) -> None:
    """Review R57 (lead): the verdicts were keyed by whole tokens and bounded by count alone, so
    4,096 tokens of up to 32 KiB each held 128 MiB of keys in a gateway's Gate; they are kept
    under ``max_chars`` characters of tokens too."""
    made = [
        issue(rig.keys["root"], rig.keys["sup"].public, ["tool:lookup"], ttl=60, budget=Budget(1000, "calls"))
        for _ in range(5)
    ]
    per_token = len(made[0].token)
    chains = policy_chain_module.PolicyChains(rig.gate.index, size=100, max_chars=2 * per_token + 10)
    for chain in made:
        assert chains.fault(chain) is None
        assert sum(len(token) for token in chains._faults) <= 2 * per_token + 10
    assert len(chains._faults) == 1  # cleared when the third would pass the bound
