"""Review R68: ``Gate.delegate(call=...)`` hands on again the grant recorded for the same call
(``_delegated_before``) only once it verifies: signed by the parent's key, linked to the parent's
grant, to the sub-agent's key, unexpired and unrevoked. A row it cannot trust (planted or edited by
anyone able to write the grants table, or revoked) is ignored: a fresh grant is issued, and its
``allow`` entry names the row and why it was ignored.

Real components: a Gate over a SQLite file; rows edited with SQL, as such a writer would."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.authority import parse_chain, verify_chain
from agentgate.authority._grant import _encode_chain
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
tools:
  lookup: {{args: {{key: {{type: string, required: true}}}}}}
roles:
  boss:
    kind: agent
    capabilities: [{{resource: tool:lookup}}]
    ttl_s: 3600
    delegation: {{max_depth: 1, max_ttl_s: 600, capabilities: [{{resource: tool:lookup}}]}}
"""


@dataclasses.dataclass
class Team:
    gate: Gate
    root: SigningKey
    boss: AgentIdentity


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    root, boss = SigningKey.generate(), SigningKey.generate()
    gate = Gate(
        parse_policy(POLICY.format(root=root.did, boss=boss.did), source="t.yaml"),
        SQLiteStore(tmp_path / "g.db"),
    )
    yield Team(gate, root, gate.issue(root, name="boss", key=boss, role="boss"))
    gate.close()


def _delegate(team: Team, key: SigningKey, call: str = "call-1") -> AgentIdentity:
    return team.gate.delegate(
        team.boss, name="helper", key=key, capabilities=["tool:lookup"], ttl=timedelta(minutes=5), call=call
    )


def _plant(team: Team, grant_id: str, token: str, audience: str) -> None:
    """Replace the row ``grant_id`` with one recording ``token`` for ``audience`` (as a writer of
    the grants table could)."""
    with team.gate.store.transaction() as tx:
        tx.execute(
            "UPDATE agentgate_grants SET token = ?, audience = ? WHERE id = ?", (token, audience, grant_id)
        )


def _last_allow_reasons(team: Team) -> tuple[str, ...]:
    team.gate.flush()
    return [e for e in team.gate.audit.entries() if e.kind == "allow"][-1].reasons


def _handed_a_fresh_verified_grant(team: Team, child: AgentIdentity, key: SigningKey, ignored: str) -> None:
    assert child.chain.id != ignored
    assert verify_chain(child.chain.token, team.root.did).tip.audience == key.did
    reasons = _last_allow_reasons(team)
    assert any(ignored in r and "ignored" in r for r in reasons), reasons


def test_a_recorded_grant_whose_signature_does_not_verify_is_not_handed_on(team: Team) -> None:
    """Review R68: a row whose tip signature was replaced (planted) was handed to the sub-agent,
    and every call on it was then refused ``bad_signature``."""
    key = SigningKey.generate()
    first = _delegate(team, key)
    tip = first.chain.tip
    forged = _encode_chain([*first.chain.links[:-1], dataclasses.replace(tip, signature=bytes(64))])
    _plant(team, tip.id, forged, key.did)

    again = _delegate(team, key)

    _handed_a_fresh_verified_grant(team, again, key, tip.id)


def test_a_recorded_grant_to_another_key_is_not_handed_on(team: Team) -> None:
    """Review R68: a genuine grant to another key, recorded under the sub-agent's key (its
    ``audience`` column edited), was handed to the sub-agent, whose every call was then refused."""
    key, other = SigningKey.generate(), SigningKey.generate()
    theirs = _delegate(team, other)
    _plant(team, theirs.chain.id, theirs.chain.token, key.did)

    mine = _delegate(team, key)

    _handed_a_fresh_verified_grant(team, mine, key, theirs.chain.id)


def test_a_recorded_token_that_does_not_parse_is_ignored(team: Team) -> None:
    """Review R68: a row whose token does not parse made every delegation for the same parent
    and sub-agent raise ``TokenFormatError`` (denial of service by one planted row)."""
    key = SigningKey.generate()
    first = _delegate(team, key, "call-0")
    _plant(team, first.chain.id, "ag1.!!.y", key.did)

    for call in ("call-1", "call-2"):  # each time: nothing cached of it
        again = _delegate(team, key, call)
        _handed_a_fresh_verified_grant(team, again, key, first.chain.id)


def test_a_revoked_recorded_grant_is_not_handed_on(team: Team) -> None:
    """Review R68: the grant recorded for the call was handed on again after it was revoked, and
    every call on it was refused ``revoked``: the parent, whose grant is live, delegates afresh."""
    key = SigningKey.generate()
    first = _delegate(team, key)
    team.gate.revoke(first, reason="test")

    again = _delegate(team, key)

    assert again.chain.id != first.chain.id
    assert not team.gate.grants.revoked(again.chain.ids)


def test_a_verified_recorded_grant_is_still_handed_on_again(team: Team) -> None:
    """Review R68: the check keeps the rule it guards: the same call gets the same grant back."""
    key = SigningKey.generate()
    first = _delegate(team, key)
    assert _delegate(team, key).chain == first.chain
    assert parse_chain(first.chain.token) == first.chain
