"""A sub-agent may not take a principal's name on another key (review R65).

``Gate.delegate(name="researcher", key=<a new key>)`` was accepted although the policy names
principal ``researcher`` with another DID: the audit log then showed ``agent:researcher`` for a
grant whose key is not researcher's, and the sub-agent's calls ran as "researcher". It is refused,
audited, ``implicit_trust_inheritance``/``inherited_identity``, as ``Gate.authorize`` refuses a
call on a principal's name and another principal's key since review R64b."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from test_langgraph import Team, _calls, _make_team, _researcher, _tools

from agentgate.capabilities import Call
from agentgate.errors import AuthorityError
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey

SEARCH = Call.tool("search", {"query": "q"})


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


def _delegate(team: Team, name: str, key: SigningKey) -> object:
    return team.gate.delegate(
        team.supervisor, name=name, key=key, capabilities=["tool:search"], ttl=timedelta(minutes=1)
    )


def _granted(team: Team, name: str) -> list[str]:
    team.gate.flush()
    return [e.kind for e in team.gate.audit.entries() if e.resource == f"agent:{name}"]


@pytest.mark.parametrize("name", ["researcher", "supervisor", "dana"])
def test_a_principals_name_on_another_key_is_refused_and_audited(team: Team, name: str) -> None:
    """Review R65: a delegation under a name the policy gives another DID was granted, and the log
    showed ``agent:NAME`` for a key that is not NAME's. Refused, naming both DIDs and the fix;
    the refusal is audited and no grant is made."""
    stranger = SigningKey.generate()
    before = _granted(team, name)
    with pytest.raises(AuthorityError) as refused:
        _delegate(team, name, stranger)
    finding = refused.value.finding
    assert finding is not None
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert stranger.did in finding.message and team.keys[name].did in finding.message
    assert "a name the policy does not give another key" in finding.message
    assert str(refused.value) == finding.message
    assert refused.value.audit_index is not None
    assert _granted(team, name) == [*before, "deny"]
    assert team.gate.delegations == []


def test_the_principals_own_key_and_an_unnamed_sub_agent_are_delegated_to(team: Team) -> None:
    """Review R65: the check refuses only a name the policy gives another key: the principal's
    own key under its name, and a name the policy does not give, are delegated to as before."""
    own = _delegate(team, "researcher", team.keys["researcher"])
    helper = _delegate(team, "helper", SigningKey.generate())
    assert team.gate.authorize(own, SEARCH, agent="researcher").allowed  # type: ignore[arg-type]
    assert team.gate.authorize(helper, SEARCH, agent="helper").allowed  # type: ignore[arg-type]
    assert _granted(team, "researcher") == ["allow"] and _granted(team, "helper") == ["allow"]


def test_issuing_under_a_principals_name_to_another_principals_key_is_refused(team: Team) -> None:
    """Review R65: ``Gate.issue(name="researcher", key=<supervisor's key>, role="supervisor")`` was
    issued, recorded as ``agent:researcher``, and every call on it then refused
    ``inherited_identity``: a grant no call could use. Refused when asked, audited, as
    ``Gate.delegate`` refuses it."""
    before = _granted(team, "researcher")
    with pytest.raises(AuthorityError) as refused:
        team.gate.issue(team.keys["root"], name="researcher", key=team.keys["supervisor"], role="supervisor")
    finding = refused.value.finding
    assert finding is not None
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert team.keys["supervisor"].did in finding.message and team.keys["researcher"].did in finding.message
    assert finding.message.startswith("an agent named researcher on key ")
    assert refused.value.audit_index is not None
    assert _granted(team, "researcher") == [*before, "deny"]


def test_a_delegation_tool_under_a_principals_name_on_another_key_is_a_tool_error(team: Team) -> None:
    """Review R65: ``delegation_tool(name="researcher", key=<a new key>)`` handed the supervisor's
    authority on to a key recorded as researcher. Each call is now refused: a tool error that
    names the fix, the sub-agent does not run, and the supervisor's run goes on (the refusal is
    of this tool's terms, not of the supervisor's identity)."""
    ask = delegation_tool(
        team.gate,
        name="researcher",
        agent=_researcher(team),
        key=SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=5),
    )
    model = ScriptedChatModel(
        turns=[_calls(("ask_researcher", {"task": "find papers"})), _calls(("search", {"query": "x"}))]
    )
    search = [t for t in _tools(team) if t.name == "search"]
    supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[ask, *search])
    result = supervisor.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
    told = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert told[0].status == "error" and "implicit_trust_inheritance/inherited_identity" in str(
        told[0].content
    )
    assert "a name the policy does not give another key" in str(told[0].content)
    assert team.ran == ["search:x"]
