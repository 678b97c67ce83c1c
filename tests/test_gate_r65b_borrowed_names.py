"""A principal's name on a key the policy does not give it, at the Gate's identity check (review R65b).

``Gate.issue`` and ``Gate.delegate`` refuse a grant under a principal's name to another key since
review R65, but ``Gate.authorize`` refused such a name only on another *principal's* key: an
identity that carries a principal's name on a sub-agent's key (a hand-built one, or one restored
from a checkpoint made before review R65) was decided and recorded as that principal. A key the
policy no longer names at all (the principal's replaced key) is still left to the engine, whose
refusal is the one docs/operations.md ("Rotating keys") promises."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from test_langgraph import NAMES, Team, _calls, _make_team, _policy_text, _tools
from test_langgraph import team as team  # the fixture

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import STOP_KEY, ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SEARCH = Call.tool("search", {"query": "q"})


def _sub_agent(team: Team, key: SigningKey) -> AgentIdentity:
    """A sub-agent of the supervisor on ``key``, under a name no principal has."""
    return team.gate.delegate(
        team.supervisor,
        name="helper",
        key=key,
        capabilities=["tool:search", "model:scripted"],
        ttl=timedelta(minutes=1),
    )


@pytest.mark.parametrize("agent", ["researcher", None])
def test_a_principals_name_on_a_sub_agents_key_is_refused(team: Team, agent: str | None) -> None:
    """Review R65b: ``AgentIdentity("researcher", <a sub-agent's key>, <its chain>)``, the
    identity a delegation under the researcher's name made until review R65, passed the identity
    check and its call ran as "researcher" on the supervisor's grant. Refused
    ``inherited_identity``, naming both keys and the fix (a name the policy gives no other key)."""
    key = SigningKey.generate()
    helper = _sub_agent(team, key)
    named = AgentIdentity("researcher", key, helper.chain)
    refused = team.gate.authorize(named, SEARCH, agent=agent)
    assert not refused.allowed
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert key.did in finding.message and team.keys["researcher"].did in finding.message
    assert "a name the policy does not give another key" in finding.message
    assert refused.reasons == (finding.message,)
    assert refused.audit_index is not None
    foreign = team.gate.refuse_foreign(named, SEARCH, agent=agent)
    assert foreign is not None and foreign.findings == refused.findings


def test_a_run_restored_on_such_an_identity_is_refused_and_ends(team: Team) -> None:
    """Review R65b: a LangGraph run whose context is such an identity (a checkpoint made before
    review R65) ran as "researcher". Its first gated call (the model's) is refused with the
    finding, no tool runs, and the run ends there (``inherited_identity`` is a dead identity)."""
    key = SigningKey.generate()
    named = AgentIdentity("researcher", key, _sub_agent(team, key).chain)
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))])
    agent = create_gated_agent(team.gate, name="researcher", model=model, tools=_tools(team))
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=named)
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.response_metadata.get(STOP_KEY) is True
    assert "implicit_trust_inheritance/inherited_identity" in str(last.content)
    assert "a name the policy does not give another key" in str(last.content)
    assert team.ran == []


def test_the_same_sub_agent_under_its_own_name_is_allowed(team: Team) -> None:
    """Review R65b: the wider check refuses the name, not the key: the same sub-agent under the
    name it was delegated with (one no principal has) is allowed."""
    helper = _sub_agent(team, SigningKey.generate())
    assert team.gate.refuse_foreign(helper, SEARCH, agent="helper") is None
    assert team.gate.authorize(helper, SEARCH, agent="helper").allowed


def test_a_principals_replaced_key_is_left_to_the_engine(tmp_path: Path) -> None:
    """Review R65b: after the policy replaces the researcher's key (docs/operations.md, "Rotating
    keys"), an identity on the old key, a run resumed from a checkpoint, is refused as the docs
    say (``... is not a principal of this policy``), not as a borrowed name: the old key is the
    researcher's own, which the policy no longer names."""
    team = _make_team(tmp_path)
    old = team.gate.issue(
        team.keys["root"], name="researcher", key=team.keys["researcher"], role="researcher"
    )
    assert team.gate.authorize(old, SEARCH, agent="researcher").allowed
    team.gate.close()
    dids = {name: team.keys[name].did for name in NAMES}
    dids["researcher"] = SigningKey.generate().did
    rotated = Gate(
        parse_policy(_policy_text(dids, 1_000_000), source="team.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    try:
        refused = rotated.authorize(old, SEARCH, agent="researcher")
        assert not refused.allowed
        assert all(f.code != "inherited_identity" for f in refused.findings)
        assert any("is not a principal of this policy" in reason for reason in refused.reasons)
        assert rotated.refuse_foreign(old, SEARCH, agent="researcher") is None
    finally:
        rotated.close()
