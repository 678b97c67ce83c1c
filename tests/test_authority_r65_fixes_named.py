"""Findings of the authority engine that said what was wrong and not what to do (review R65).

``call_not_covered`` for a call no capability covers named what the grant holds; a hand-built
link signed by a key that is not its parent's holder (``issuer_not_parent_audience``) or starting
before its parent (``starts_before_parent``) stated the rule broken; a failing approval hook said
"failing closed". Each message now ends with what the person refused can do."""

from __future__ import annotations

from pathlib import Path

from test_fourstates_r57_findings import ALICE, BOB, MALLORY, NOW, ROOT, _decided, _hand_built

from agentgate.authority import ApprovalRequirement, GrantRepository, Invocation, decide, issue
from agentgate.capabilities import Call
from agentgate.store import SQLiteStore


def _call_decided(tmp_path: Path, call: Call, **hook: object) -> str:
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    chain = issue(ROOT, BOB.did, ["tool:search.*"], ttl=3600, now=NOW)
    invocation = Invocation.sign(BOB, chain, call, now=NOW + 1)
    (finding,) = decide(invocation, repo=repo, trusted=ROOT.did, now=NOW + 1, **hook).findings  # type: ignore[arg-type]
    return f"{finding.kind.value} {finding.code}: {finding.message}"


def test_a_call_no_capability_covers_says_to_ask_for_a_grant_that_covers_it(tmp_path: Path) -> None:
    """Review R65: "the grant does not cover tool:pay invoke (it holds ...)" named no fix, where a
    value outside a constraint says "ask for a grant that covers it". The list of what the grant
    holds still ends the message (``gate._records.without_held`` removes it from what a model is
    told)."""
    assert _call_decided(tmp_path, Call.tool("pay", {})) == (
        "scope_creep call_not_covered: the grant does not cover tool:pay invoke: ask for a grant "
        "that covers it (it holds tool:search.*)"
    )


def test_a_link_signed_by_a_stranger_says_who_may_sign_it(tmp_path: Path) -> None:
    """Review R65: ``issuer_not_parent_audience`` said "only the parent's holder may delegate it"."""
    finding = _decided(_hand_built(MALLORY), tmp_path)
    assert finding.code == "issuer_not_parent_audience"
    assert finding.message.endswith(
        "only the parent's holder may delegate it: sign the link with the key the parent grant was "
        "given to, or delegate from a grant of the signer's own"
    )


def test_a_link_starting_before_its_parent_says_when_it_may_start(tmp_path: Path) -> None:
    """Review R65: ``starts_before_parent`` said "a child starts no earlier than its parent"."""
    finding = _decided(_hand_built(ALICE, not_before=NOW - 10), tmp_path)
    assert finding.code == "starts_before_parent"
    assert finding.message.endswith(
        "a child starts no earlier than its parent: sign it with a not-before of 2027-01-15T08:00:00Z or later"
    )


def test_a_failing_approval_hook_says_what_to_do(tmp_path: Path) -> None:
    """Review R65: ``approval_check_failed`` said "failing closed" and no fix."""

    def broken(call: Call, chain: object, invocation: object) -> ApprovalRequirement | None:
        raise RuntimeError("approvals table missing")

    assert _call_decided(tmp_path, Call.tool("search.web", {}), approvals=broken) == (
        "authority_chain_opacity approval_check_failed: the approval check failed (RuntimeError); "
        "failing closed: repair the approval check (its error is logged by agentgate.authority), "
        "then make the call again"
    )


def test_a_resource_name_that_is_not_canonical_says_to_use_the_canonical_one(tmp_path: Path) -> None:
    """Review R65: ``ambiguous_resource`` ended "refused rather than guessed", with no fix."""
    said = _call_decided(tmp_path, Call("tool:Search.Web", "invoke", {}))
    assert said.startswith(
        "authority_chain_opacity ambiguous_resource: resource name 'Search.Web' is not canonical"
    )
    assert said.endswith("; refused rather than guessed: make the call on the resource's canonical name")
