"""One wording for one fact: a chain with a revoked link (review R65).

The authority engine ("has been revoked"), the Gate's and the gateway's ``revoked_refusal`` ("was
revoked") and ``Gate.delegate`` ("grant X of P's chain is revoked: nothing to delegate", naming the
revoked grant with the least id, not the first link) said it three ways. Each is now
``revoked_finding`` of the authority package, parameterised only where the facts differ: since
when, and whether the chain was calling or delegating."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import Team, _make_team

from agentgate.authority import GrantRepository, Invocation, decide, delegate, issue, revoke
from agentgate.capabilities import Call
from agentgate.errors import AuthorityError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

NOW = 1_800_000_000
ROOT, ALICE, BOB, CAROL = (SigningKey(bytes([i]) * 32) for i in (91, 92, 93, 94))
DEAD = "every grant below a revoked grant is dead"


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


def test_the_engine_says_a_link_was_revoked_as_the_gate_does(tmp_path: Path) -> None:
    """Review R65: the engine named a revoked link "has been revoked", the Gate "was revoked"."""
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    root = issue(ROOT, ALICE.did, ["tool:search.*"], ttl=3600, max_depth=2, now=NOW)
    middle = delegate(root, ALICE, BOB.did, ["tool:search.*"], ttl=600, now=NOW)
    tip = delegate(middle, BOB, CAROL.did, ["tool:search.web"], ttl=60, now=NOW)
    revoke(repo, middle.tip.id, now=NOW)
    invocation = Invocation.sign(CAROL, tip, Call.tool("search.web", {}), now=NOW + 1)
    (finding,) = decide(invocation, repo=repo, trusted=ROOT.did, now=NOW + 1).findings
    assert finding.message == (
        f"link 1 ({middle.tip.id[:16]}...) of this chain was revoked; {DEAD}: ask for a new grant"
    )
    assert (finding.kind.value, finding.code, finding.grant) == (
        "non_revocable_grant",
        "revoked",
        middle.tip.id,
    )


def test_a_call_the_revoked_chain_does_not_cover_reads_as_one_it_covers(team: Team) -> None:
    """Review R65: the Gate's ``revoked_refusal`` (a call outside a revoked chain) and the engine's
    ``revoked`` (a call inside it) are one text for one chain."""
    team.gate.revoke(team.supervisor, reason="stop")
    outside = team.gate.authorize(team.supervisor, Call.tool("shell", {"cmd": "ls"}))
    inside = team.gate.authorize(team.supervisor, Call.tool("search", {"query": "q"}))
    assert [f.message for f in outside.findings] == [f.message for f in inside.findings]
    (finding,) = inside.findings
    assert finding.message.startswith(
        f"link 0 ({team.supervisor.grant_id[:16]}...) of this chain was revoked; "
    )


def test_delegating_from_a_revoked_chain_names_the_first_revoked_link_in_the_same_words(team: Team) -> None:
    """Review R65: ``Gate.delegate`` said "grant X of P's chain is revoked: nothing to delegate",
    X the revoked id that sorts first, not the first revoked link; it is the engine's wording,
    for the delegating holder."""
    sub = team.gate.delegate(
        team.supervisor,
        name="helper",
        key=SigningKey.generate(),
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    )
    team.gate.revoke(team.supervisor, reason="stop")
    with pytest.raises(AuthorityError) as refused:
        team.gate.delegate(
            sub,
            name="helper2",
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    finding = refused.value.finding
    assert finding is not None
    assert (finding.kind.value, finding.code, finding.grant) == (
        "non_revocable_grant",
        "revoked",
        team.supervisor.grant_id,
    )
    assert finding.message == (
        f"link 0 ({team.supervisor.grant_id[:16]}...) of helper's chain was revoked; {DEAD}, so it "
        "hands nothing on: ask for a new grant for helper"
    )
    assert str(refused.value) == finding.message
