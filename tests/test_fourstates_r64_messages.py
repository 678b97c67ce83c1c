"""Findings of the four failure states that named no fix, or a made-up name (review R64).

Each refusal below is reached through the real API (``delegate``, ``decide``, ``Gate.issue``,
``Gate.delegate``) and must say, in its message, what the person refused can do about it: the
same standard as tests/test_fourstates_r57_findings.py, for the refusals that review missed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import Team, _make_team

from agentgate.authority import Chain, GrantRepository, Invocation, decide, delegate, issue, revoke
from agentgate.capabilities import Call
from agentgate.errors import AuthorityError
from agentgate.findings import Finding
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

NOW = 1_800_000_000
ROOT, ALICE, BOB, MALLORY = (SigningKey(bytes([i]) * 32) for i in (81, 82, 83, 84))
HELD = ["tool:search.*", "tool:pay?amount<=5"]


def _parent(max_depth: int = 2) -> Chain:
    return issue(ROOT, ALICE.did, HELD, ttl=3600, max_depth=max_depth, now=NOW)


def _refused(parent: Chain, holder: SigningKey = ALICE, *, caps: list[str], now: int = NOW) -> Finding:
    with pytest.raises(AuthorityError) as refused:
        delegate(parent, holder, BOB.did, caps, ttl=60, now=now)
    assert isinstance(refused.value.finding, Finding)
    return refused.value.finding


@pytest.mark.parametrize(
    ("child", "named"),
    [
        ("tool:*", "invoke on resources matching tool:*"),
        ("model:*", "generate on resources matching model:*"),
        ("tool:*?amount<=5", "invoke on resources matching tool:*"),
    ],
)
def test_a_wildcard_child_is_named_by_its_pattern_not_a_made_up_tool(child: str, named: str) -> None:
    """Review R64: a delegation of ``tool:*`` from ``tool:search.*`` was refused saying the child
    "allows tool:zz-witness invoke", a tool name the verifier made up."""
    finding = _refused(_parent(), caps=[child])
    assert (finding.kind.value, finding.code) == ("scope_creep", "capability_widened")
    assert "zz-witness" not in finding.message
    assert named in finding.message


def test_a_wildcard_child_of_a_narrower_wildcard_is_named_by_its_pattern() -> None:
    """Review R64: ``tool:search.*`` under ``tool:search.web.*`` named ``tool:search.zz-witness``."""
    parent = issue(ROOT, ALICE.did, ["tool:search.web.*"], ttl=3600, now=NOW)
    finding = _refused(parent, caps=["tool:search.*"])
    assert "zz-witness" not in finding.message
    assert "on resources matching tool:search.* that no parent capability covers" in finding.message


def test_delegating_from_a_grant_of_depth_zero_says_whom_to_ask() -> None:
    """Review R64: ``delegate`` refused a grant of max depth 0 with no word on the fix, which the
    same finding at decision time gives (ask its issuer)."""
    finding = _refused(_parent(max_depth=0), caps=["tool:search.web"])
    assert (finding.kind.value, finding.code) == ("scope_creep", "delegation_not_allowed")
    assert "ask its issuer" in finding.message


def test_delegating_a_grant_one_does_not_hold_says_whose_key_delegates_it() -> None:
    """Review R64: ``not_the_audience`` said only "X cannot delegate a grant given to Y"."""
    finding = _refused(_parent(), MALLORY, caps=["tool:search.web"])
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "not_the_audience")
    assert "delegate with the key of its holder" in finding.message


def test_a_grant_not_yet_valid_says_what_to_do() -> None:
    """Review R64: ``grant_not_yet_valid`` named the times but not the fix."""
    finding = _refused(_parent(), caps=["tool:search.web"], now=NOW - 3600)
    assert (finding.kind.value, finding.code) == ("scope_creep", "grant_not_yet_valid")
    assert "wait until then, or check this host's clock" in finding.message


def test_a_call_on_a_revoked_chain_says_what_to_do(tmp_path: Path) -> None:
    """Review R64: ``revoked`` said the chain was dead but not where a live grant comes from."""
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    chain = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    revoke(repo, chain.root.id, now=NOW)
    invocation = Invocation.sign(BOB, chain, Call.tool("search.web", {}), now=NOW + 1)
    decision = decide(invocation, repo=repo, trusted=ROOT.did, now=NOW + 1)
    (finding,) = decision.findings
    assert (finding.kind.value, finding.code) == ("non_revocable_grant", "revoked")
    assert "ask for a new grant" in finding.message


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


def test_the_gate_refusing_an_untrusted_issuer_says_what_to_do(team: Team) -> None:
    """Review R64: ``Gate.issue`` from a key that is no trust anchor said "it issues nothing"."""
    with pytest.raises(AuthorityError) as refused:
        team.gate.issue(MALLORY, name="x", key=SigningKey.generate(), role="supervisor")
    finding = refused.value.finding
    assert finding is not None and finding.code == "untrusted_root"
    assert "issue with one of the policy's trust anchors" in finding.message


def test_the_gate_refusing_to_delegate_from_an_untrusted_chain_says_what_to_do(team: Team) -> None:
    """Review R64: ``Gate.delegate`` from a chain of another anchor named no fix."""
    from agentgate.gate import AgentIdentity

    stranger = issue(MALLORY, team.keys["supervisor"].public, ["tool:search"], ttl=600)
    parent = AgentIdentity("supervisor", team.keys["supervisor"], stranger)
    with pytest.raises(AuthorityError) as refused:
        team.gate.delegate(
            parent,
            name="sub",
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    finding = refused.value.finding
    assert finding is not None and finding.code == "untrusted_root"
    assert "issue with one of the policy's trust anchors" in finding.message


def test_the_gate_refusing_to_delegate_from_a_revoked_chain_says_what_to_do(team: Team) -> None:
    """Review R64: ``Gate.delegate`` from a revoked grant said only "nothing to delegate"."""
    team.gate.revoke(team.supervisor, reason="stop")
    with pytest.raises(AuthorityError) as refused:
        team.gate.delegate(
            team.supervisor,
            name="sub",
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    finding = refused.value.finding
    assert finding is not None and (finding.kind.value, finding.code) == ("non_revocable_grant", "revoked")
    assert "ask for a new grant" in finding.message


def test_a_call_with_no_identity_says_how_to_give_the_run_one(team: Team) -> None:
    """Review R64: ``no_chain`` said no authority could be shown, and left the fix to ``hint``,
    which the reasons a caller reads (``Authorization.reasons``) do not carry."""
    refused = team.gate.authorize(None, Call.tool("search", {"query": "q"}))
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("authority_chain_opacity", "no_chain")
    assert "context=AgentIdentity" in finding.message
    assert "context=AgentIdentity" in refused.reasons[0]
