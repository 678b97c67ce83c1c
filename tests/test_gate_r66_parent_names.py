"""The delegating identity's name at ``Gate.delegate`` (review R66).

Since review R65b ``Gate.authorize`` refuses an identity that carries a principal's name on a key
the policy does not give that principal (``inherited_identity``), and ``Gate.delegate`` refuses
such a name for the sub-agent. ``Gate.delegate`` did not check the *parent's* name: an identity
built by hand, or restored from a checkpoint, under a principal's name on another key delegated,
and ``Gate.delegations`` listed the grant as handed on by that principal."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import NAMES, Team, _policy_text

from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SEARCH = Call.tool("search", {"query": "q"})


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    """The team of ``test_langgraph`` whose supervisor's grants may be handed on twice, so that a
    sub-agent may delegate in turn (the engine's depth check does not hide the name check)."""
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000).replace(
        "max_depth: 1", "max_depth: 2"
    )
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    yield Team(gate, keys, supervisor, tmp_path, [])
    gate.close()


def _delegate(team: Team, parent: AgentIdentity, name: str = "helper") -> AgentIdentity:
    return team.gate.delegate(
        parent, name=name, key=SigningKey.generate(), capabilities=["tool:search"], ttl=timedelta(minutes=1)
    )


def _entries(team: Team, resource: str) -> list[str]:
    team.gate.flush()
    return [e.kind for e in team.gate.audit.entries() if e.resource == resource]


def _refused_for_parent_name(team: Team, parent: AgentIdentity, name: str) -> Denied:
    """``Gate.delegate`` from ``parent`` refused ``inherited_identity``, audited, with no grant."""
    before = _entries(team, f"agent:{name}")
    listed = team.gate.delegations
    with pytest.raises(Denied) as refused:
        _delegate(team, parent, name)
    finding = refused.value.finding
    assert finding is not None
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert f"agent {parent.name} is running on the key" in finding.message
    assert team.keys[parent.name].did in finding.message  # the name's own key in the policy
    assert str(refused.value) == finding.message
    assert refused.value.audit_index is not None
    assert _entries(team, f"agent:{name}") == [*before, "deny"]
    assert team.gate.delegations == listed
    # As a call on the same identity is refused.
    call = team.gate.authorize(parent, SEARCH)
    assert call.findings == (finding,)
    return refused.value


def test_a_principals_name_on_another_principals_key_delegates_nothing(team: Team) -> None:
    """Review R66: ``AgentIdentity("researcher", <supervisor's key>, <supervisor's grant>)``
    delegated from the supervisor's grant, and ``Gate.delegations`` listed the sub-agent as
    handed on by "researcher". Refused as a call on it is (``inherited_identity``)."""
    parent = AgentIdentity("researcher", team.keys["supervisor"], team.supervisor.chain)
    refused = _refused_for_parent_name(team, parent, "helper")
    assert "grant of supervisor" in str(refused)


def test_a_principals_name_on_a_sub_agents_key_delegates_nothing(team: Team) -> None:
    """Review R66: a sub-agent's identity under the researcher's name (a delegation made under it
    before review R65, restored from a checkpoint) delegated in turn, as "researcher". Refused."""
    helper = _delegate(team, team.supervisor)
    parent = AgentIdentity("researcher", helper.key, helper.chain)
    refused = _refused_for_parent_name(team, parent, "worker")
    assert "sub-agent of supervisor" in str(refused)


def test_parents_under_their_own_names_delegate(team: Team) -> None:
    """Review R66: the check refuses the parent's name, not its key: the supervisor, and its
    sub-agent under the name it was delegated with, delegate as before."""
    helper = _delegate(team, team.supervisor)
    worker = _delegate(team, helper, "worker")
    assert team.gate.authorize(worker, SEARCH, agent="worker").allowed
    assert [(parent, child.name) for parent, child in team.gate.delegations] == [
        ("supervisor", "helper"),
        ("helper", "worker"),
    ]
