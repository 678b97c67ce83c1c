"""Gate refusals of the four failure states that named no fix or missed a case, review R64.

The Gate's identity check compared only the name an identity carries with the agent a call
names, so an identity that carries a principal's name on another principal's key and grant
passed; and the Gate's ``inherited_identity`` and ``revoked`` refusals said what was wrong but
not what to do."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import Team, _make_team

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey

SEARCH = Call.tool("search", {"query": "q"})


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


@pytest.mark.parametrize("agent", ["researcher", None])
def test_a_principal_name_on_another_principals_key_is_refused(team: Team, agent: str | None) -> None:
    """Review R64: ``AgentIdentity("researcher", <supervisor's key>, <supervisor's chain>)`` was
    allowed under the supervisor's role, although the policy gives researcher another DID: a
    sub-agent running on its parent's identity, refused ``inherited_identity`` naming both keys
    and the fix."""
    borrowed = AgentIdentity("researcher", team.keys["supervisor"], team.supervisor.chain)
    refused = team.gate.authorize(borrowed, SEARCH, agent=agent)
    assert not refused.allowed
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert team.keys["researcher"].did in finding.message
    assert team.keys["supervisor"].did in finding.message
    assert "Gate.delegate" in finding.message
    assert refused.reasons == (finding.message,)


def test_the_principals_own_key_with_its_name_is_not_refused_by_the_check(team: Team) -> None:
    """Review R64: the new check refuses only a DID the policy does not give the name: the
    supervisor on its own key, and a sub-agent named by no principal, still pass it. (Since review
    R66 the supervisor's grant under another name is refused for the name it was issued under,
    which ``Gate.issue`` signs into it: tests/test_gate_r66_granted_names.py.)"""
    assert team.gate.authorize(team.supervisor, SEARCH, agent="supervisor").allowed
    helper = AgentIdentity("helper", team.keys["supervisor"], team.supervisor.chain)
    refused = team.gate.refuse_foreign(helper, SEARCH, agent="helper")
    assert refused is not None
    (finding,) = refused.findings
    assert "agent helper presents grant" in finding.message and "principal" not in finding.message


def test_a_call_naming_another_agent_says_how_to_give_it_its_own_grant(team: Team) -> None:
    """Review R64: the refusal of an agent running on another's identity said "agent X has no
    grant of its own" and left the fix to the finding's hint, which the reasons do not carry."""
    refused = team.gate.authorize(team.supervisor, SEARCH, agent="researcher")
    (finding,) = refused.findings
    assert finding.code == "inherited_identity"
    assert "Gate.delegate" in finding.message and "delegation_tool" in finding.message
    assert refused.reasons == (finding.message,)


def test_a_call_outside_a_revoked_chain_says_to_ask_for_a_new_grant(team: Team) -> None:
    """Review R64: the Gate's own ``revoked`` refusal (a call the revoked chain does not cover,
    ``revoked_refusal``, which the gateway gives too) said the chain was dead and no fix, where
    the authority engine's says "ask for a new grant"."""
    team.gate.revoke(team.supervisor, reason="stop")
    refused = team.gate.authorize(team.supervisor, Call.tool("shell", {"cmd": "ls"}))
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("non_revocable_grant", "revoked")
    assert "ask for a new grant" in finding.message
    assert refused.reasons == (finding.message,)


def test_a_sub_agent_on_its_own_delegated_key_is_not_refused(team: Team) -> None:
    """Review R64: the new check refuses a principal's name on another *principal's* key only; a
    sub-agent that ``Gate.delegate`` gave a grant of its own, on a key the policy does not name,
    runs under the name its delegator chose. Review R65: a name the policy gives another key
    (``researcher``) is refused by ``Gate.delegate`` itself (tests/test_authority_r65_delegated_names.py),
    so the sub-agent here is named as no principal is."""
    sub = team.gate.delegate(
        team.supervisor,
        name="helper",
        key=SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    )
    assert team.gate.authorize(sub, SEARCH, agent="helper").allowed
