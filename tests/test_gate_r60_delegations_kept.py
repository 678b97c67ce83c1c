"""``Gate.delegations`` is bounded and forgets revoked sub-agents (review R60).

It kept every delegation until its grant expired, revoked ones too, each with the sub-agent's
signing key: at 10 delegations a second with a one-hour TTL about 565 MB. A revocation through
the Gate now drops every delegation whose chain it kills (a revoked ancestor kills every
descendant), and the list keeps at most ``DELEGATIONS_KEPT`` entries (the oldest go). Nothing
decides from the list: a delegation for the same call is answered from the store
(``_delegated_before``), so an entry dropped changes no decision.

Real components: a Gate over a SQLite store (test_langgraph's team)."""

from __future__ import annotations

import gc
import weakref
from datetime import timedelta

import pytest
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate.errors import Revoked
from agentgate.gate import AgentIdentity, _delegation
from agentgate.keys import SigningKey

CAPS = ["tool:search"]


def _delegate(
    team: Team, parent: AgentIdentity, name: str, key: SigningKey | None = None, call: str | None = None
) -> AgentIdentity:
    return team.gate.delegate(
        parent,
        name=name,
        key=key or SigningKey.generate(),
        capabilities=CAPS,
        ttl=timedelta(minutes=5),
        call=call,
    )


def test_the_list_keeps_at_most_delegations_kept_the_oldest_go(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R60: Gate.delegations grew without bound (one entry per live delegation)."""
    monkeypatch.setattr(_delegation, "DELEGATIONS_KEPT", 3)
    made = [_delegate(team, team.supervisor, f"sub{i}") for i in range(5)]
    assert [child.grant_id for _, child in team.gate.delegations] == [c.grant_id for c in made[2:]]


def test_a_revoked_sub_agent_leaves_the_list_and_the_gate_keeps_no_key_of_it(team: Team) -> None:
    """Review R60: a revoked sub-agent stayed in Gate.delegations, its signing key with it, until expiry."""
    key = SigningKey.generate()
    kept = weakref.ref(key)
    child = _delegate(team, team.supervisor, "doomed", key)
    other = _delegate(team, team.supervisor, "spared")
    team.gate.revoke(child, reason="done")
    assert [c.name for _, c in team.gate.delegations] == ["spared"]
    del key, child
    gc.collect()
    assert kept() is None
    assert other.grant_id in {c.grant_id for _, c in team.gate.delegations}


def test_a_revoked_ancestor_drops_every_descendant(team: Team) -> None:
    """Review R60: revoking an ancestor left its descendants' delegations (and keys) in the list."""
    middle = team.gate.delegate(
        team.supervisor,
        name="middle",
        key=SigningKey.generate(),
        capabilities=CAPS,
        ttl=timedelta(minutes=5),
    )
    _delegate(team, team.supervisor, "beside")
    assert len(team.gate.delegations) == 2
    team.gate.revoke(team.supervisor, reason="stop")
    assert team.gate.delegations == []
    with pytest.raises(Revoked):
        _delegate(team, middle, "below")


def test_revoking_a_holder_drops_its_delegations(team: Team) -> None:
    """Review R60: revoke_holder left the holder's delegations in the list."""
    key = SigningKey.generate()
    _delegate(team, team.supervisor, "leaked", key)
    _delegate(team, team.supervisor, "kept")
    team.gate.revoke_holder(key.public, reason="leaked")
    assert [c.name for _, c in team.gate.delegations] == ["kept"]


def test_a_delegation_dropped_from_the_list_is_still_handed_on_again_from_the_store(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What decides is the store, not the list: the same call after its entry was evicted gets
    the same grant, not a fresh one."""
    monkeypatch.setattr(_delegation, "DELEGATIONS_KEPT", 1)
    key = SigningKey.generate()
    first = _delegate(team, team.supervisor, "again", key, call="t|tools|c0")
    _delegate(team, team.supervisor, "evictor")
    assert first.grant_id not in {c.grant_id for _, c in team.gate.delegations}
    assert _delegate(team, team.supervisor, "again", key, call="t|tools|c0").grant_id == first.grant_id
