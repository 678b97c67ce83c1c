"""The four failure states as a security reviewer enumerates them (review R57): each way a chain
can widen, inherit, outlive or hide its authority, built with the real API, is refused under the
right kind with a specific code and a message that says what to do."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import Budget, Chain, GrantRepository, Invocation, decide, delegate, issue
from agentgate.authority._grant import _encode_chain
from agentgate.authority._operations import _sign
from agentgate.capabilities import Call, Capability
from agentgate.errors import AuthorityError
from agentgate.findings import Finding
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

NOW = 1_800_000_000
ROOT, ALICE, BOB, MALLORY = (SigningKey(bytes([i]) * 32) for i in (71, 72, 73, 74))
HELD = ["tool:pay?amount<=500&currency=EUR|USD", "tool:search.*"]


def _parent() -> Chain:
    return issue(ROOT, ALICE.did, HELD, ttl=3600, budget=Budget(100, "calls"), max_depth=2, now=NOW)


def _refused(**asked: Any) -> Finding:
    with pytest.raises(AuthorityError) as refused:
        delegate(
            _parent(), ALICE, BOB.did, now=NOW, **{"ttl": 60, "capabilities": ["tool:search.web"], **asked}
        )
    assert isinstance(refused.value.finding, Finding)
    return refused.value.finding


def _hand_built(signer: SigningKey = ALICE, **fields: Any) -> Chain:
    """The parent with one link appended that ``delegate`` would refuse to sign."""
    parent = _parent()
    link = _sign(
        signer,
        **{
            "audience": BOB.did,
            "capabilities": [Capability.parse("tool:search.web")],
            "budget": Budget(1, "calls"),
            "not_before": NOW,
            "expires": NOW + 60,
            "max_depth": 0,
            "purpose": "",
            "parent": parent.tip.id,
            **fields,
        },
    )
    links = (*parent.links, link)
    return Chain(links, _encode_chain(links))


def _decided(chain: Chain, tmp_path: Path, trusted: SigningKey = ROOT) -> Finding:
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    invocation = Invocation.sign(BOB, chain, Call.tool("search.web", {}), now=NOW + 1)
    decision = decide(invocation, repo=repo, trusted=trusted.did, now=NOW + 1)
    assert decision.outcome.value == "deny"
    (finding,) = decision.findings
    return finding


def test_a_dropped_constraint_is_named_as_left_open_not_as_a_made_up_value(tmp_path: Path) -> None:
    """Review R57: a delegation that dropped the parent's amount limit was refused as "allows
    amount='\\x00zz-witness'", a value the verifier made up, not the one the person dropped."""
    finding = _refused(capabilities=["tool:pay?currency=EUR"])
    assert (finding.kind.value, finding.code, finding.field) == (
        "scope_creep",
        "constraint_widened",
        "constraints.amount",
    )
    assert "leaves amount unconstrained" in finding.message and "narrow amount" in finding.message
    assert "zz-witness" not in finding.message and "\x00" not in finding.message
    hand_built = _hand_built(capabilities=[Capability.parse("tool:pay?currency=EUR")])
    assert _decided(hand_built, tmp_path).message == finding.message
    # A constraint the child keeps but widens still names the concrete value.
    widened = _refused(capabilities=["tool:pay?amount<=900&currency=EUR"])
    assert "allows amount=900" in widened.message


@pytest.mark.parametrize(
    ("asked", "kind", "code", "says"),
    [
        (
            {"capabilities": ["tool:*"]},
            "scope_creep",
            "capability_widened",
            "delegate only capabilities within",
        ),
        (
            {"capabilities": ["tool:search.web#*"]},
            "scope_creep",
            "capability_widened",
            "every action on tool:search.web",
        ),
        ({"max_depth": 2}, "scope_creep", "depth_widened", "give it a max depth of at most 1"),
        (
            {"budget": Budget(1000, "calls")},
            "scope_creep",
            "budget_widened",
            "lower it to at most the parent's",
        ),
        (
            {"budget": Budget(5, "tokens")},
            "scope_creep",
            "budget_unit_changed",
            "give the child a budget in calls",
        ),
        ({"ttl": 7200}, "non_revocable_grant", "outlives_parent", "a child never outlives its parent"),
    ],
)
def test_each_widening_delegation_is_refused_saying_what_to_do(
    asked: dict[str, Any], kind: str, code: str, says: str
) -> None:
    """Review R57: capability, depth and budget widenings were refused with no word on the fix
    (and a child's ``*`` action was named as the made-up action ``zz_witness``)."""
    finding = _refused(**asked)
    assert (finding.kind.value, finding.code) == (kind, code)
    assert says in finding.message
    assert "zz_witness" not in finding.message


@pytest.mark.parametrize(
    ("fields", "signer", "kind", "code", "says"),
    [
        ({"budget": None}, ALICE, "scope_creep", "budget_widened", "give the child a budget of at most"),
        (
            {"not_before": NOW - 10},
            ALICE,
            "scope_creep",
            "starts_before_parent",
            "no earlier than its parent",
        ),
        ({}, MALLORY, "authority_chain_opacity", "issuer_not_parent_audience", "only the parent's holder"),
        ({"parent": None}, ALICE, "authority_chain_opacity", "parent_mismatch", "spliced"),
        (
            {"audience": ALICE.did},
            ALICE,
            "implicit_trust_inheritance",
            "self_delegation",
            "sub-agent's own key",
        ),
        ({"audience": ROOT.did}, ALICE, "implicit_trust_inheritance", "delegation_cycle", "flow back"),
    ],
)
def test_each_hand_built_link_is_denied_at_decision_time_saying_what_to_do(
    tmp_path: Path, fields: dict[str, Any], signer: SigningKey, kind: str, code: str, says: str
) -> None:
    """Review R57: a hand-built link without a budget, starting before its parent or signed by a
    stranger was denied without a word on the fix (``starts_before_parent`` named no times)."""
    finding = _decided(_hand_built(signer, **fields), tmp_path)
    assert (finding.kind.value, finding.code) == (kind, code)
    assert says in finding.message


def test_a_start_before_the_parent_names_both_times(tmp_path: Path) -> None:
    """Review R57: starts_before_parent said only "before its parent does", naming no time."""
    finding = _decided(_hand_built(not_before=NOW - 10), tmp_path)
    assert "2027-01-15T07:59:50Z" in finding.message and "2027-01-15T08:00:00Z" in finding.message


def test_a_link_the_parent_forbids_to_delegate_says_whom_to_ask(tmp_path: Path) -> None:
    """Review R57: delegation_not_allowed named the depth but not what to do about it."""
    parent = issue(ROOT, ALICE.did, HELD, ttl=3600, max_depth=0, now=NOW)
    link = _sign(
        ALICE,
        audience=BOB.did,
        capabilities=[Capability.parse("tool:search.web")],
        budget=None,
        not_before=NOW,
        expires=NOW + 60,
        max_depth=0,
        purpose="",
        parent=parent.tip.id,
    )
    finding = _decided(Chain((*parent.links, link), _encode_chain([*parent.links, link])), tmp_path)
    assert (finding.kind.value, finding.code) == ("scope_creep", "delegation_not_allowed")
    assert "ask its issuer" in finding.message


def test_a_chain_from_a_stranger_says_which_anchors_it_needs(tmp_path: Path) -> None:
    """Review R57: untrusted_root said the issuer is no trust anchor, not what to present instead."""
    stranger = issue(MALLORY, BOB.did, ["tool:search.web"], ttl=600, now=NOW)
    finding = _decided(stranger, tmp_path)
    assert (finding.kind.value, finding.code) == ("authority_chain_opacity", "untrusted_root")
    assert "present a chain from one of its trust anchors" in finding.message


def _presented(tmp_path: Path, **changed: Any) -> Finding:
    """A call by the chain's holder, signed, then presented with ``changed`` (the chain token,
    the call or the signature swapped for another's)."""
    chain = delegate(_parent(), ALICE, BOB.did, ["tool:search.*"], ttl=60, now=NOW)
    invocation = Invocation.sign(BOB, chain, Call.tool("search.web", {"q": "a"}), now=NOW + 1)
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    decision = decide(replace(invocation, **changed), repo=repo, trusted=ROOT.did, now=NOW + 1)
    assert decision.outcome.value == "deny"
    (finding,) = decision.findings
    return finding


@pytest.mark.parametrize(
    ("changed", "code", "says"),
    [
        ("chain", "tip_mismatch", "sign the call for the chain presented with it"),
        ("signature", "bad_invocation_signature", "sign the call with the key of the chain's holder"),
        ("tool", "call_mismatch", "sign the call that is made"),
        ("args", "args_digest_mismatch", "sign the call again with the arguments it is made with"),
    ],
)
def test_a_call_presented_otherwise_than_signed_is_opacity_saying_what_to_do(
    tmp_path: Path, changed: str, code: str, says: str
) -> None:
    """Review R57: a call presented with another chain, another signature, another tool or other
    arguments than signed was denied without a word on what the caller should do."""
    other = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=30, now=NOW)
    swapped: dict[str, Any] = {
        "chain": {"chain_token": other.token},
        "signature": {
            "signature": Invocation.sign(BOB, other, Call.tool("search.web", {}), now=NOW).signature
        },
        "tool": {"call": Call.tool("search.images", {"q": "a"})},
        "args": {"call": Call.tool("search.web", {"q": "b"})},
    }[changed]
    finding = _presented(tmp_path, **swapped)
    assert (finding.kind.value, finding.code) == ("authority_chain_opacity", code)
    assert says in finding.message


def test_a_forged_link_says_the_token_was_altered(tmp_path: Path) -> None:
    """Review R57: bad_signature said a link is not validly signed, not what to do."""
    chain = _hand_built()
    forged = Chain(chain.links, chain.token[:-4] + ("AAAA" if not chain.token.endswith("AAAA") else "BBBB"))
    finding = _decided(forged, tmp_path)
    assert (finding.kind.value, finding.code) == ("authority_chain_opacity", "bad_signature")
    assert "ask its issuer for a new one" in finding.message


# --- the reviewer's enumeration, at decision time: already refused, kept so ---------------------------


def test_a_token_copied_to_another_agent_or_used_by_its_delegator_is_implicit_trust(tmp_path: Path) -> None:
    child = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    for caller in (MALLORY, ALICE):  # a stranger holding a copy; the delegator using its child's grant
        invocation = Invocation.sign(caller, child, Call.tool("search.web", {}), now=NOW + 1)
        (finding,) = decide(invocation, repo=repo, trusted=ROOT.did, now=NOW + 1).findings
        assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "wrong_holder")
        assert "delegate to the caller's own key" in finding.message


def test_a_link_spliced_from_another_chain_or_the_root_dropped_is_opacity(tmp_path: Path) -> None:
    child = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    elsewhere = issue(ROOT, ALICE.did, ["tool:search.*"], ttl=600, now=NOW)
    spliced = delegate(elsewhere, ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    for links, code in (
        ((child.links[0], spliced.links[1]), "parent_mismatch"),
        ((child.links[1],), "root_has_parent"),
    ):
        finding = _decided(Chain(links, _encode_chain(list(links))), tmp_path)
        assert (finding.kind.value, finding.code) == ("authority_chain_opacity", code)


def test_a_grant_never_recorded_in_the_store_is_revoked_by_its_id_and_an_unreadable_store_fails_closed(
    tmp_path: Path,
) -> None:
    child = delegate(_parent(), ALICE, BOB.did, ["tool:search.web"], ttl=60, now=NOW)
    store = SQLiteStore(tmp_path / "s.db")
    repo = GrantRepository(store)
    repo.revoke(child.links[0].id, reason="leaked", now=NOW)  # issued outside the store: never recorded
    invocation = Invocation.sign(BOB, child, Call.tool("search.web", {}), now=NOW + 1)
    (finding,) = decide(invocation, repo=repo, trusted=ROOT.did, now=NOW + 1).findings
    assert (finding.kind.value, finding.code) == ("non_revocable_grant", "revoked")
    store.close()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"s.db{suffix}").unlink(missing_ok=True)
    again = Invocation.sign(BOB, child, Call.tool("search.web", {}), now=NOW + 1)
    decision = decide(again, repo=repo, trusted=ROOT.did, now=NOW + 1)
    assert decision.outcome.value == "deny"
    (finding,) = decision.findings
    assert (finding.kind.value, finding.code) == ("non_revocable_grant", "revocation_unreachable")
    assert not (tmp_path / "s.db").exists()
