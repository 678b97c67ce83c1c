"""A hostile pass over ``Gate.delegate`` and sub-agent identities (review R60).

Each odd delegation ends in a typed error with its finding, audited, or in a grant no wider than
asked: to the delegator's own key (``self_delegation``), back to the trust anchor's key
(``delegation_cycle``), from a revoked parent (``revoked``), from an expired one
(``grant_expired``), past the policy's TTL (``delegation_ttl_above_policy``), from a sub-agent
whose grant allows no further delegation (``delegation_not_allowed``, also for a call id the
first parent used). One defect found: ``delegate(call=...)`` handed on the grant recorded for the
same call whatever ``ttl`` was asked, so a delegation asking for one minute got the ten-minute
grant made before; a grant is now handed on again only if it expires no later than a fresh one
would.

Real components: a Gate over a SQLite store (test_langgraph's team)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate.authority import Budget, issue
from agentgate.errors import AuthorityError, Denied, Expired, Revoked, ScopeCreep
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import role_grant_template

CAPS = ["tool:search"]


def _delegate(
    team: Team,
    parent: AgentIdentity | None = None,
    *,
    key: SigningKey | None = None,
    ttl: timedelta = timedelta(minutes=5),
    call: str | None = None,
) -> AgentIdentity:
    return team.gate.delegate(
        parent or team.supervisor,
        name="sub",
        key=key or SigningKey.generate(),
        capabilities=CAPS,
        ttl=ttl,
        call=call,
    )


def _refused(team: Team, error: type[AuthorityError], code: str, **terms: object) -> None:
    with pytest.raises(error) as refused:
        _delegate(team, **terms)  # type: ignore[arg-type]
    assert refused.value.finding is not None and refused.value.finding.code == code
    assert refused.value.audit_index is not None


def test_the_same_call_asking_a_shorter_ttl_gets_a_grant_no_longer_lived(team: Team) -> None:
    """Review R60: delegate(call=...) handed on the earlier grant whatever ttl was asked (10 min for 1 min asked)."""
    key = SigningKey.generate()
    first = _delegate(team, key=key, ttl=timedelta(minutes=10), call="t|c")
    again = _delegate(team, key=key, ttl=timedelta(minutes=1), call="t|c")
    assert again.grant_id != first.grant_id
    assert again.chain.tip.expires - again.chain.tip.not_before <= 60
    # Either grant lives no longer than ten minutes: one is handed on again, no third is made.
    same = _delegate(team, key=key, ttl=timedelta(minutes=10), call="t|c")
    assert same.grant_id in (first.grant_id, again.grant_id)


def test_delegating_to_ones_own_key_is_refused(team: Team) -> None:
    _refused(team, Denied, "self_delegation", key=team.keys["supervisor"])


def test_delegating_back_to_the_trust_anchor_is_refused(team: Team) -> None:
    _refused(team, Denied, "delegation_cycle", key=team.keys["root"])


def test_a_ttl_above_the_policy_is_refused_not_clamped_to_the_parent(team: Team) -> None:
    _refused(team, ScopeCreep, "delegation_ttl_above_policy", ttl=timedelta(hours=10))


def test_a_revoked_parent_hands_nothing_on(team: Team) -> None:
    team.gate.revoke(team.supervisor, reason="stop")
    _refused(team, Revoked, "revoked", call="t|c")


def test_an_expired_parent_hands_nothing_on(team: Team) -> None:
    template = role_grant_template(team.gate.policy, "supervisor")
    assert template.budget is not None
    chain = issue(
        team.keys["root"],
        team.keys["supervisor"].public,
        template.capabilities,
        ttl=60,
        budget=Budget(template.budget.limit, template.budget.unit),
        max_depth=template.max_depth,
        purpose="role supervisor",
        now=time.time() - 120,  # issued two minutes ago for one: expired
    )
    expired = AgentIdentity("supervisor", team.keys["supervisor"], chain)
    _refused(team, Expired, "grant_expired", parent=expired, call="t|c")


def test_a_call_id_reused_under_another_parent_is_that_parents_delegation(team: Team) -> None:
    key = SigningKey.generate()
    _delegate(team, key=key, call="t|c")
    middle = team.gate.delegate(
        team.supervisor, name="mid", key=SigningKey.generate(), capabilities=CAPS, ttl=timedelta(minutes=5)
    )
    _refused(team, ScopeCreep, "delegation_not_allowed", parent=middle, key=key, call="t|c")
