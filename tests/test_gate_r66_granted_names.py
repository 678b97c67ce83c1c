"""An identity's name bound to the grant the Gate made under it (review R66).

Names were not signed into the grants the Gate makes as something it checks: an identity's name
was a label its holder chose. ``AgentIdentity("Helper", <helper's key>, <helper's grant>)``, or
the researcher's own grant under ``"Researcher"`` or ``"researcher\\u200b"``, was decided,
queued under its own per-agent concurrency limit (the scheduler counts by name), shown to
approvers as the requester and recorded in spans under that name. ``Gate.delegate`` signs the
name into the grant's purpose (``sub-agent NAME``), and ``Gate.issue`` now signs a digest of it
(``role R; agent TAG``): an identity presenting such a grant under another name is refused
``inherited_identity``. Grants made outside the Gate (``agentgate grant issue``, ``issue``) carry
no such purpose, and their holders still name themselves (docs/concepts.md, "Agent name")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate.authority import issue
from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey

SEARCH = Call.tool("search", {"query": "q"})


def _helper(team: Team, call: str | None = None) -> AgentIdentity:
    return team.gate.delegate(
        team.supervisor,
        name="helper",
        key=SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
        call=call,
    )


def _refused_as_renamed(team: Team, identity: AgentIdentity) -> None:
    refused = team.gate.authorize(identity, SEARCH)
    assert not refused.allowed
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert f"agent {identity.name} presents grant {identity.grant_id}" in finding.message
    assert "under the name it was granted" in finding.message
    assert refused.reasons == (finding.message,)
    assert refused.audit_index is not None
    assert team.gate.refuse_foreign(identity, SEARCH) is not None


@pytest.mark.parametrize("name", ["Helper", "helper\u200b", "helper ", "worker"])
@pytest.mark.parametrize("call", [None, "thread-1|call-1"])
def test_a_delegated_grant_under_another_name_is_refused(team: Team, name: str, call: str | None) -> None:
    """Review R66: a sub-agent's grant, delegated to "helper", was decided under any name its
    holder gave it. Refused: the grant's purpose names the sub-agent it was delegated to."""
    helper = _helper(team, call)
    assert team.gate.authorize(helper, SEARCH, agent="helper").allowed
    _refused_as_renamed(team, AgentIdentity(name, helper.key, helper.chain))


@pytest.mark.parametrize("name", ["Supervisor", "supervisor\u200b", "boss"])
def test_an_issued_grant_under_another_name_is_refused(team: Team, name: str) -> None:
    """Review R66: the supervisor's own key and grant under any name the policy does not give
    another key was decided under that name (its own per-agent concurrency limit, the requester
    approvers are shown). Refused: ``Gate.issue`` signs a digest of the name into the grant."""
    assert team.supervisor.chain.tip.purpose.startswith("role supervisor; agent ")
    assert "supervisor" not in team.supervisor.chain.tip.purpose.removeprefix("role supervisor")
    _refused_as_renamed(team, AgentIdentity(name, team.keys["supervisor"], team.supervisor.chain))


def test_a_renamed_parent_delegates_nothing(team: Team) -> None:
    """Review R66: a grant under another name than the one it was granted under hands nothing on
    either (``Gate.delegate`` asks the parent what ``authorize`` asks of a call)."""
    boss = AgentIdentity("boss", team.keys["supervisor"], team.supervisor.chain)
    with pytest.raises(Denied, match="agent boss presents grant"):
        team.gate.delegate(
            boss,
            name="helper",
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )


def test_grants_under_their_own_names_and_grants_made_outside_the_gate_are_decided(team: Team) -> None:
    """Review R66: the check refuses only a name its grant does not carry: the supervisor and its
    sub-agent under the names they were granted, and a grant made outside the Gate (its purpose is
    the issuer's text, which binds no name), are decided as before."""
    assert team.gate.authorize(team.supervisor, SEARCH, agent="supervisor").allowed
    helper = _helper(team)
    assert team.gate.authorize(helper, SEARCH, agent="helper").allowed
    outside = issue(
        team.keys["root"],
        team.keys["researcher"].public,
        ["tool:search"],
        ttl=60,
        purpose="role researcher",
    )
    for name in ("researcher", "Researcher"):
        assert team.gate.authorize(AgentIdentity(name, team.keys["researcher"], outside), SEARCH).allowed
