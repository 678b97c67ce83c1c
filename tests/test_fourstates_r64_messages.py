"""Findings of the four failure states that named no fix, or a made-up name (review R64).

Each refusal below is reached through the real API (``delegate``, ``decide``, ``Gate.issue``,
``Gate.delegate``) and must say, in its message, what the person refused can do about it: the
same standard as tests/test_fourstates_r57_findings.py, for the refusals that review missed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import Team, _make_team

from agentgate.authority import (
    Authority,
    Chain,
    GrantRepository,
    Invocation,
    decide,
    delegate,
    issue,
    revoke,
)
from agentgate.authority._grant import _encode_chain
from agentgate.capabilities import Call
from agentgate.errors import AuthorityError
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity
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


def _links_decided(chain: Chain, tmp_path: Path) -> Finding:
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    invocation = Invocation.sign(BOB, chain, Call.tool("search.web", {}), now=NOW + 1)
    (finding,) = decide(invocation, repo=repo, trusted=ROOT.did, now=NOW + 1).findings
    return finding


def test_a_chain_spliced_or_cut_says_what_to_present_instead(tmp_path: Path) -> None:
    """Review R64: ``parent_mismatch`` and ``root_has_parent`` said how the chain broke, not what
    to present instead."""
    child = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    other = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    spliced = Chain((child.links[0], other.links[1]), _encode_chain([child.links[0], other.links[1]]))
    cut = Chain((child.links[1],), _encode_chain([child.links[1]]))
    for chain, code in ((spliced, "parent_mismatch"), (cut, "root_has_parent")):
        finding = _links_decided(chain, tmp_path)
        assert (finding.kind.value, finding.code) == ("authority_chain_opacity", code)
        assert "present the chain as it was delegated" in finding.message


def test_a_delegation_back_up_the_chain_says_what_to_do(tmp_path: Path) -> None:
    """Review R64: ``delegation_cycle`` said authority may not flow back, not what to do."""
    middle = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    with pytest.raises(AuthorityError) as refused:
        delegate(middle, BOB, ALICE.did, ["tool:search.web"], ttl=30, now=NOW)
    finding = refused.value.finding
    assert finding is not None and finding.code == "delegation_cycle"
    assert "uses the grant it already holds" in finding.message


def test_an_edited_chain_object_says_what_to_pass_instead(tmp_path: Path) -> None:
    """Review R64: ``tip_mismatch`` for a ``Chain`` whose fields were edited said only that its
    links are not its token's, at ``decide_held`` and at ``delegate``."""
    chain = _parent()
    edited = replace(chain, links=_parent().links)  # another grant's links, this token
    held = Authority(GrantRepository(SQLiteStore(tmp_path / "s.db")), ROOT.did)
    (finding,) = held.decide_held(ALICE, edited, Call.tool("search.web", {}), now=NOW + 1).findings
    assert finding.code == "tip_mismatch"
    assert "pass the Chain parsed from its token (parse_chain), unedited" in finding.message
    with pytest.raises(AuthorityError) as refused:
        delegate(edited, ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    assert refused.value.finding is not None
    assert "pass the Chain parsed from its token (parse_chain), unedited" in refused.value.finding.message


def test_arguments_that_cannot_be_digested_say_what_arguments_can_be(tmp_path: Path) -> None:
    """Review R64: ``args_not_canonical`` quoted the encoder's complaint and no fix."""
    held = Authority(GrantRepository(SQLiteStore(tmp_path / "s.db")), ROOT.did)
    call = Call.tool("search.web", {"q": float("nan")})
    (finding,) = held.decide_held(ALICE, _parent(), call, now=NOW + 1).findings
    assert finding.code == "args_not_canonical"
    assert "pass arguments JSON can carry" in finding.message


def test_an_unreadable_chain_says_what_to_present_instead(tmp_path: Path) -> None:
    """Review R64: ``malformed_token`` said the chain cannot be read and why, not what to do."""
    held = Authority(GrantRepository(SQLiteStore(tmp_path / "s.db")), ROOT.did)
    (finding,) = held.decide_held(ALICE, "ag1.nonsense", Call.tool("search.web", {}), now=NOW + 1).findings
    assert finding.code == "malformed_token"
    assert "present the token exactly as it was written" in finding.message


def test_a_child_outliving_its_parent_says_the_longest_ttl_it_may_have() -> None:
    """Review R64: ``outlives_parent`` gave both expiries and the rule, not the ttl that fits."""
    parent = issue(ROOT, ALICE.did, HELD, ttl=3600, now=NOW)
    with pytest.raises(AuthorityError) as refused:
        delegate(parent, ALICE, BOB.did, ["tool:search.web"], ttl=7200, now=NOW + 600)
    finding = refused.value.finding
    assert finding is not None and finding.code == "outlives_parent"
    assert "give it a ttl of at most 3000s" in finding.message


def test_delegating_with_no_identity_raises_saying_how_to_give_the_run_one(team: Team) -> None:
    """Review R64: ``Gate.delegate(None, ...)`` raised "there is no grant to delegate from", with
    no fix in the text a developer reads (the finding's hint had it)."""
    with pytest.raises(AuthorityError) as refused:
        team.gate.delegate(
            None,
            name="sub",
            key=SigningKey.generate(),
            capabilities=["tool:search"],
            ttl=timedelta(minutes=1),
        )
    assert "context=AgentIdentity" in str(refused.value)
    assert refused.value.finding is not None and refused.value.finding.code == "no_chain"
