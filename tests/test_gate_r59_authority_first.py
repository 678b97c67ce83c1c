"""The authority's refusal comes first, as at the gateway (review R59).

``Gate.authorize`` of a call the policy refuses (no rule of the principal's roles allows it, or
the chain is outside the policy's bounds: ``PolicyChains``) verified the chain's signatures, links
and trust anchor first since review R58, but the authority's other refusals (a link expired or not
yet valid, a link revoked, a call the chain's tip does not cover) still came after the policy's
reasons when both applied: the Gate answered ``no rule of role clerk allows tool:refund`` where
the gateway, for the same chain and call, answers the authority's refusal with its code (401
``grant_expired``, ``revoked``; 403 ``call_not_covered``). The Gate now answers the authority's
refusal first too, and a call the chain does not cover on a revoked chain is refused ``revoked``,
as the gateway refuses it. An allowed call's path is unchanged (the authority engine verifies a
chain once, from its cache).

Real components: a Gate over a SQLite store, chains signed with the library's ``issue``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_gate_r57_policy_chain import LOOKUP, NAMES, REFUND, Rig, _policy

from agentgate.authority import Budget, Chain, issue
from agentgate.authority import _decision as decision_module
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

DAY = 86400


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    keys = {name: SigningKey.generate() for name in NAMES}
    with Gate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        yield Rig(gate, keys, gate.issue(keys["root"], name="sup", key=keys["sup"], role="sup"))


def _root(rig: Rig, holder: str, caps: list[str], **terms: Any) -> AgentIdentity:
    """A root grant to ``holder`` signed by the trust anchor with the library's ``issue``."""
    chain = issue(rig.keys["root"], rig.keys[holder].public, caps, **terms)
    return AgentIdentity(name=holder, key=rig.keys[holder], chain=chain)


def _refused(rig: Rig, auth: Authorization) -> list[tuple[str, str]]:
    """The (kind, code) of ``auth``'s findings, once checked that it is a recorded deny whose
    entry names the first of them."""
    assert auth.verdict == "deny", auth.explain()
    assert auth.audit_index is not None and auth.findings
    rig.gate.flush()
    entry = next(e for e in rig.gate.audit.entries() if e.index == auth.audit_index)
    assert entry.kind == "deny" and any(auth.findings[0].code in r for r in entry.reasons)
    return [(f.kind.value, f.code) for f in auth.findings]


# The clerk's role has no rule for tool:refund (the policy's verdict refuses it); sup's root grant
# may live 3600 s at most and carry 1000 calls (a longer one is outside the policy).
POLICY_DENIES = {"holder": "clerk", "caps": ["tool:*"], "budget": None}
OUTSIDE_POLICY = {"holder": "sup", "caps": ["tool:*"], "budget": Budget(1000, "calls")}


@pytest.mark.parametrize("refusal", [POLICY_DENIES, OUTSIDE_POLICY], ids=["policy_denies", "outside_policy"])
@pytest.mark.parametrize(
    ("ttl", "start", "code"),
    [(10 * DAY, -20 * DAY, "grant_expired"), (10 * DAY, DAY, "grant_not_yet_valid")],
    ids=["expired", "not_yet_valid"],
)
def test_a_chain_out_of_its_time_is_refused_for_its_time_before_the_policy(
    rig: Rig, refusal: dict[str, Any], ttl: int, start: int, code: str
) -> None:
    """Review R59: an expired (or not yet valid) chain on a call the policy also refuses was refused with the policy's reason."""
    who = _root(
        rig, refusal["holder"], refusal["caps"], ttl=ttl, budget=refusal["budget"], now=time.time() + start
    )
    assert [c for _, c in _refused(rig, rig.gate.authorize(who, REFUND))] == [code]


@pytest.mark.parametrize("refusal", [POLICY_DENIES, OUTSIDE_POLICY], ids=["policy_denies", "outside_policy"])
def test_a_revoked_chain_is_refused_revoked_before_the_policy(rig: Rig, refusal: dict[str, Any]) -> None:
    """Review R59: a revoked chain on a call the policy also refuses was refused with the policy's reason."""
    who = _root(rig, refusal["holder"], refusal["caps"], ttl=10 * DAY, budget=refusal["budget"])
    rig.gate.revoke(who.chain)
    assert _refused(rig, rig.gate.authorize(who, REFUND)) == [("non_revocable_grant", "revoked")]


@pytest.mark.parametrize("refusal", [POLICY_DENIES, OUTSIDE_POLICY], ids=["policy_denies", "outside_policy"])
def test_a_call_the_chain_does_not_cover_is_refused_call_not_covered_before_the_policy(
    rig: Rig, refusal: dict[str, Any]
) -> None:
    """Review R59: a call outside the chain's tip that the policy also refuses was refused with the policy's reason."""
    who = _root(rig, refusal["holder"], ["tool:lookup"], ttl=10 * DAY, budget=refusal["budget"])
    assert _refused(rig, rig.gate.authorize(who, REFUND)) == [("scope_creep", "call_not_covered")]
    # Revoked, it is refused revoked, as the gateway answers a revoked grant whatever it asks for.
    rig.gate.revoke(who.chain)
    assert _refused(rig, rig.gate.authorize(who, REFUND)) == [("non_revocable_grant", "revoked")]


def test_a_revoked_chain_that_does_not_cover_a_call_the_policy_allows_is_refused_revoked(rig: Rig) -> None:
    """Review R59: a revoked chain asked for a call its tip does not cover was refused call_not_covered, where the gateway says revoked."""
    who = _root(rig, "sup", ["tool:lookup"], ttl=600, budget=Budget(1000, "calls"))
    assert rig.gate.authorize(who, LOOKUP).allowed
    assert _refused(rig, rig.gate.authorize(who, REFUND)) == [("scope_creep", "call_not_covered")]
    rig.gate.revoke(who.chain)
    assert _refused(rig, rig.gate.authorize(who, REFUND)) == [("non_revocable_grant", "revoked")]


def test_the_policys_reason_stands_where_the_authority_allows(rig: Rig) -> None:
    """A chain the authority allows is refused for the policy's reason, as before."""
    clerk = _root(rig, "clerk", ["tool:*"], ttl=600)
    refused = rig.gate.authorize(clerk, REFUND)
    assert refused.verdict == "deny" and refused.findings == () and "no rule" in " ".join(refused.reasons)
    long = _root(rig, "sup", ["tool:*"], ttl=10 * DAY, budget=Budget(1000, "calls"))
    assert _refused(rig, rig.gate.authorize(long, REFUND)) == [
        ("non_revocable_grant", "root_ttl_above_policy")
    ]


def test_verifying_a_refused_call_first_costs_an_allowed_call_nothing(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: the authority decides a call the policy refuses once per chain's verification
    (the engine's cache), and an allowed call is verified once, as before."""
    checked: list[str] = []
    real = decision_module.chain_finding

    def counted(chain: Chain, anchors: Any) -> Finding | None:
        checked.append(chain.id)
        return real(chain, anchors)

    monkeypatch.setattr(decision_module, "chain_finding", counted)
    allowed = _root(rig, "sup", ["tool:*"], ttl=600, budget=Budget(1000, "calls"))
    for _ in range(3):
        assert rig.gate.authorize(allowed, LOOKUP).allowed
    assert checked == [allowed.chain.id]
    long = _root(rig, "sup", ["tool:*"], ttl=10 * DAY, budget=Budget(1000, "calls"))
    for _ in range(3):
        assert _refused(rig, rig.gate.authorize(long, REFUND)) == [
            ("non_revocable_grant", "root_ttl_above_policy")
        ]
    assert checked == [allowed.chain.id, long.chain.id]
