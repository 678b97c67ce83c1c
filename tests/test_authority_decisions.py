"""Decisions: holder binding, replay (also across restarts and crashes), revocation cascade,
fail-closed store, canonical tool names, approvals; on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_authority_grants import ALICE_KEY, BOB_KEY, ROOT_KEY, _decide, _refund_root

from agentgate.authority import (
    ApprovalRequirement,
    Authority,
    Budget,
    Chain,
    ChainCache,
    GrantRepository,
    Invocation,
    Outcome,
    chain_weight,
    decide,
    delegate,
    issue,
    record,
    revoke,
)
from agentgate.authority._encoding import b64url_encode, canonical_json
from agentgate.authority._invocation import INVOCATION_CONTEXT
from agentgate.capabilities import Call
from agentgate.errors import InputError, TokenFormatError
from agentgate.findings import FindingKind
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store

NOW = 1_800_000_000
ROOT, ALICE, BOB, CAROL = (SigningKey(bytes([i]) * 32) for i in range(11, 15))
CALL = Call.tool("payments.refund", {"amount": 50, "currency": "EUR"})


def chain3() -> Chain:
    c1 = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500&currency=EUR|USD"], ttl=3600,
               budget=Budget(1_000_000), now=NOW)  # fmt: skip
    c2 = delegate(c1, ALICE, BOB.did, ["tool:payments.refund?amount<=100&currency=EUR"], ttl=1800, now=NOW)
    return delegate(c2, BOB, CAROL.did, ["tool:payments.refund?amount<=60&currency=EUR"], ttl=600, now=NOW)


@pytest.fixture
def repo(store: Store) -> GrantRepository:
    """Both stores: for everything that touches revocations and nonces."""
    return GrantRepository(store)


@pytest.fixture
def local(sqlite_store: SQLiteStore) -> GrantRepository:
    """SQLite only: for rules decided before the store is consulted."""
    return GrantRepository(sqlite_store)


def run(
    repo: GrantRepository, inv: Invocation, now: float = NOW + 1, **kw: object
) -> tuple[Outcome, str | None]:
    d = decide(inv, repo=repo, trusted=ROOT.public, now=now, cache=ChainCache(), **kw)  # type: ignore[arg-type]
    assert (d.outcome is Outcome.DENY) == bool(d.findings)
    return d.outcome, (d.findings[0].code if d.findings else None)


def test_allow_carries_the_evidence(repo: GrantRepository) -> None:
    chain = chain3()
    inv = Invocation.sign(CAROL, chain, CALL, now=NOW)
    d = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1)
    assert d.outcome is Outcome.ALLOW and d.allowed
    assert d.chain == chain.ids and d.principal == CAROL.did and d.invocation_id == inv.id
    assert d.budgets == tuple((g.id, Budget(1_000_000)) for g in chain.links)


def test_token_used_by_someone_other_than_its_audience_is_denied(local: GrantRepository) -> None:
    chain = chain3()
    for thief in (BOB, ALICE, SigningKey.generate()):
        d = decide(Invocation.sign(thief, chain, CALL, now=NOW), repo=local, trusted=ROOT.public, now=NOW)
        assert d.outcome is Outcome.DENY
        assert (d.findings[0].kind, d.findings[0].code) == (
            FindingKind.IMPLICIT_TRUST_INHERITANCE,
            "wrong_holder",
        )


def test_replayed_invocation_is_denied(repo: GrantRepository) -> None:
    chain = chain3()
    inv = Invocation.sign(CAROL, chain, CALL, now=NOW)
    assert run(repo, inv) == (Outcome.ALLOW, None)
    assert run(repo, inv) == (Outcome.DENY, "replayed_invocation")
    wire = Invocation.decode(inv.encode(), chain.token, CALL)
    assert run(repo, wire) == (Outcome.DENY, "replayed_invocation")


def test_replay_is_denied_after_a_restart(store: Store) -> None:
    inv = Invocation.sign(CAROL, chain3(), CALL, now=NOW)
    assert run(GrantRepository(store), inv) == (Outcome.ALLOW, None)
    reopened = type(store)(store.url)  # a new process would open the store like this
    try:
        assert run(GrantRepository(reopened), inv) == (Outcome.DENY, "replayed_invocation")
    finally:
        reopened.close()


def test_replay_is_denied_after_the_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL right after an allow: the nonce (synchronous=NORMAL, WAL) must still be there."""
    db = tmp_path / "a.db"
    chain = chain3()
    inv = Invocation.sign(CAROL, chain, CALL, now=NOW)
    (tmp_path / "inv").write_text(inv.encode())
    (tmp_path / "chain").write_text(chain.token)
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from agentgate.authority import GrantRepository, Invocation, decide
        from agentgate.capabilities import Call
        from agentgate.keys import PublicKey
        from agentgate.store import SQLiteStore
        d = Path({str(tmp_path)!r})
        call = Call.tool("payments.refund", {{"amount": 50, "currency": "EUR"}})
        inv = Invocation.decode((d / "inv").read_text(), (d / "chain").read_text(), call)
        decision = decide(inv, repo=GrantRepository(SQLiteStore({str(db)!r})),
                          trusted=PublicKey.from_did({ROOT.did!r}), now={NOW + 1})
        print(decision.outcome.value, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "allow", proc.stderr
    assert proc.returncode == -9
    store = SQLiteStore(db)
    try:
        assert run(GrantRepository(store), inv) == (Outcome.DENY, "replayed_invocation")
    finally:
        store.close()


def test_invocation_replayed_for_another_tool_or_arguments_is_denied(local: GrantRepository) -> None:
    chain = chain3()
    wire = Invocation.sign(CAROL, chain, CALL, now=NOW).encode()
    other_args = Call.tool("payments.refund", {"amount": 60, "currency": "EUR"})
    assert run(local, Invocation.decode(wire, chain, other_args)) == (Outcome.DENY, "args_digest_mismatch")
    other_tool = Call.tool("payments.charge", {"amount": 50, "currency": "EUR"})
    assert run(local, Invocation.decode(wire, chain, other_tool)) == (Outcome.DENY, "call_mismatch")
    # the original is still unused, so it goes through once
    assert run(local, Invocation.decode(wire, chain, CALL)) == (Outcome.ALLOW, None)


def test_edited_invocation_fields_fail_the_signature(local: GrantRepository) -> None:
    from dataclasses import replace

    inv = Invocation.sign(CAROL, chain3(), CALL, now=NOW)
    assert run(local, replace(inv, expires=inv.expires + 100)) == (Outcome.DENY, "bad_invocation_signature")
    assert run(local, replace(inv, signature=b"")) == (Outcome.DENY, "bad_invocation_signature")


def test_call_outside_the_grant_is_scope_creep(local: GrantRepository) -> None:
    chain = chain3()
    for call in (
        Call.tool("payments.refund", {"amount": 61, "currency": "EUR"}),
        Call.tool("payments.refund", {"amount": 50, "currency": "USD"}),
        Call.tool("payments.refund", {"amount": 50}),
        Call.tool("shell.run", {}),
    ):
        d = decide(Invocation.sign(CAROL, chain, call, now=NOW), repo=local, trusted=ROOT.public, now=NOW)
        assert d.outcome is Outcome.DENY
        assert (d.findings[0].kind, d.findings[0].code) == (FindingKind.SCOPE_CREEP, "call_not_covered")


@pytest.mark.parametrize(
    "name", ["Payments.refund", " payments.refund", "payments.refund\n", "payments.re\u200bfund",
             "payments.refund\u0430", "payments/../refund", "../payments.refund", "ｐayments.refund"],
)  # fmt: skip
def test_ambiguous_tool_names_are_denied_never_guessed(local: GrantRepository, name: str) -> None:
    call = Call(f"tool:{name}", "invoke", {"amount": 50, "currency": "EUR"})
    assert run(local, Invocation.sign(CAROL, chain3(), call, now=NOW)) == (Outcome.DENY, "ambiguous_resource")


def test_revoked_ancestor_kills_the_live_child(repo: GrantRepository) -> None:
    chain = chain3()
    record(repo, chain, now=NOW)
    assert run(repo, Invocation.sign(CAROL, chain, CALL, now=NOW)) == (Outcome.ALLOW, None)
    revoke(repo, chain.root.id, now=NOW)
    d = decide(Invocation.sign(CAROL, chain, CALL, now=NOW), repo=repo, trusted=ROOT.public, now=NOW)
    assert (d.outcome, d.findings[0].kind, d.findings[0].code) == (
        Outcome.DENY, FindingKind.NON_REVOCABLE_GRANT, "revoked")  # fmt: skip
    assert d.findings[0].grant == chain.root.id
    assert set(repo.descendants(chain.root.id)) == set(chain.ids[1:])


def test_child_delegated_after_its_parent_was_revoked_is_dead(repo: GrantRepository) -> None:
    c1 = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500&currency=EUR"], ttl=3600, now=NOW)
    revoke(repo, c1, now=NOW)
    late = delegate(c1, ALICE, CAROL.did, ["tool:payments.refund?amount<=60&currency=EUR"], ttl=60, now=NOW)
    d = decide(Invocation.sign(CAROL, late, CALL, now=NOW), repo=repo, trusted=ROOT.public, now=NOW)
    assert d.outcome is Outcome.DENY and d.findings[0].code == "revoked"


def test_trust_anchors_may_be_keys_or_dids(local: GrantRepository) -> None:
    chain = chain3()
    for trusted in (ROOT.public, ROOT.did, [ROOT.did], frozenset({ROOT.public}), (CAROL.public, ROOT.public)):
        inv = Invocation.sign(CAROL, chain, CALL, now=NOW)
        assert decide(inv, repo=local, trusted=trusted, now=NOW).allowed  # type: ignore[arg-type]
    inv = Invocation.sign(CAROL, chain, CALL, now=NOW)
    assert decide(inv, repo=local, trusted=[CAROL.did], now=NOW).findings[0].code == "untrusted_root"


def test_revocation_is_seen_through_a_warm_cache(repo: GrantRepository) -> None:
    """The chain is cached; revocation still is read on every decision, also from another connection."""
    chain = chain3()
    authority = Authority(repo, ROOT.public)
    assert authority.decide(Invocation.sign(CAROL, chain, CALL, now=NOW), now=NOW).allowed
    other = type(repo.store)(repo.store.url)
    try:
        revoke(GrantRepository(other), chain.links[1].id, now=NOW)
    finally:
        other.close()
    d = authority.decide(Invocation.sign(CAROL, chain, CALL, now=NOW), now=NOW)
    assert d.outcome is Outcome.DENY and d.findings[0].code == "revoked"


def test_unreachable_revocation_state_fails_closed(store: Store) -> None:
    repo = GrantRepository(store)
    repo.close()
    store.close()
    d = decide(Invocation.sign(CAROL, chain3(), CALL, now=NOW), repo=repo, trusted=ROOT.public, now=NOW)
    assert d.outcome is Outcome.DENY
    assert (d.findings[0].kind, d.findings[0].code) == (
        FindingKind.NON_REVOCABLE_GRANT,
        "revocation_unreachable",
    )


def test_times_are_checked_on_every_decision(local: GrantRepository) -> None:
    chain = chain3()  # tip expires at NOW + 600
    authority = Authority(local, ROOT.public)
    assert authority.decide(Invocation.sign(CAROL, chain, CALL, now=NOW + 500), now=NOW + 500).allowed
    d = authority.decide(Invocation.sign(CAROL, chain, CALL, now=NOW + 600), now=NOW + 600)
    assert d.findings[0].code == "grant_expired"
    d = authority.decide(Invocation.sign(CAROL, chain, CALL, now=NOW - 31), now=NOW - 31)
    assert d.findings[0].code == "grant_not_yet_valid"


def test_expired_invocation_and_clock_skew_beyond_tolerance(local: GrantRepository) -> None:
    chain = chain3()
    inv = Invocation.sign(CAROL, chain, CALL, now=NOW, ttl=60)
    assert run(local, inv, now=NOW + 60) == (Outcome.DENY, "invocation_expired")
    future = Invocation.sign(CAROL, chain, CALL, now=NOW + 120)
    assert run(local, future, now=NOW) == (Outcome.DENY, "invocation_not_yet_valid")
    slightly = Invocation.sign(CAROL, chain, CALL, now=NOW + 20)
    assert run(local, slightly, now=NOW) == (Outcome.ALLOW, None)


def test_malformed_chain_in_an_invocation_is_denied(local: GrantRepository) -> None:
    inv = Invocation.sign(CAROL, chain3(), CALL, now=NOW)
    from dataclasses import replace

    for token in ("", "ag1", "ag1.%%%.AA", "x" * 100_000, inv.chain_token + ".AA"):
        assert run(local, replace(inv, chain_token=token))[0] is Outcome.DENY


def test_approval_hook_produces_approval_required_without_spending_the_nonce(repo: GrantRepository) -> None:
    seen: list[str] = []

    def hook(call: Call, chain: Chain, invocation: Invocation) -> ApprovalRequirement | None:
        if invocation.id in seen:
            return None  # the Gate found a valid approval bound to this invocation
        seen.append(invocation.id)
        return ApprovalRequirement(("did:key:finance-lead",), reason="refunds need a second person")

    authority = Authority(repo, ROOT.public, approvals=hook)
    inv = Invocation.sign(CAROL, chain3(), CALL, now=NOW)
    first = authority.decide(inv, now=NOW)
    assert first.outcome is Outcome.APPROVAL_REQUIRED and first.approval is not None
    assert first.approval.approvers == ("did:key:finance-lead",) and not first.findings
    assert authority.decide(inv, now=NOW).outcome is Outcome.ALLOW
    assert authority.decide(inv, now=NOW).findings[0].code == "replayed_invocation"


def test_approval_hook_is_not_asked_for_calls_that_are_denied_anyway(local: GrantRepository) -> None:
    asked: list[Call] = []

    def hook(call: Call, chain: Chain, invocation: Invocation) -> ApprovalRequirement | None:
        asked.append(call)
        return ApprovalRequirement(("x",))

    call = Call.tool("payments.refund", {"amount": 500, "currency": "EUR"})
    d = Authority(local, ROOT.public, approvals=hook).decide(
        Invocation.sign(CAROL, chain3(), call, now=NOW), now=NOW
    )
    assert d.outcome is Outcome.DENY and asked == []


def test_invocation_wire_form_is_strict() -> None:
    from agentgate.errors import TokenFormatError

    chain = chain3()
    wire = Invocation.sign(CAROL, chain, CALL, now=NOW).encode()
    for bad in (wire + ".", wire + "A", "agi2" + wire[4:], wire.replace(".", "..", 1), ""):
        with pytest.raises(TokenFormatError):
            Invocation.decode(bad, chain, CALL)


def test_decisions_are_frozen_and_serializable(local: GrantRepository) -> None:
    import dataclasses
    import json

    d = run(local, Invocation.sign(CAROL, chain3(), CALL, now=NOW))
    decision = decide(
        Invocation.sign(CAROL, chain3(), CALL, now=NOW), repo=local, trusted=ROOT.public, now=NOW
    )
    assert d[0] is Outcome.ALLOW
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.outcome = Outcome.DENY  # type: ignore[misc]
    assert json.loads(json.dumps(decision.to_dict()))["outcome"] == "allow"


def test_nonces_are_pruned_by_the_product_path(sqlite_store: SQLiteStore) -> None:
    """Expired nonces go through the product's own pruning: a repository's first nonce (and
    every 1024th after) deletes the nonces that expired over an hour ago by the verifier's clock,
    never by a signed ``exp`` (the live invocations' nonces, signed for NOW, stay)."""
    import time

    first, second = GrantRepository(sqlite_store), None
    try:
        inv = Invocation.sign(CAROL, chain3(), CALL, now=NOW)
        assert run(first, inv)[0] is Outcome.ALLOW
        with sqlite_store.transaction() as tx:  # a nonce that expired over an hour ago
            tx.execute(
                "INSERT INTO agentgate_nonces (principal, nonce, expires) VALUES (?, ?, ?)",
                (CAROL.did, "stale", int(time.time()) - 3601),
            )
        second = GrantRepository(sqlite_store)  # another process: its first nonce prunes
        later = Invocation.sign(CAROL, chain3(), CALL, now=NOW)
        assert run(second, later)[0] is Outcome.ALLOW
        kept = sorted(str(n) for (n,) in sqlite_store.query("SELECT nonce FROM agentgate_nonces"))
        assert kept == sorted([inv.nonce, later.nonce])
        assert run(second, inv) == (Outcome.DENY, "replayed_invocation")
    finally:
        first.close()
        if second is not None:
            second.close()


def test_env_store_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgate.store import open_store

    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "e.db"))
    store = open_store()
    try:
        assert (
            run(GrantRepository(store), Invocation.sign(CAROL, chain3(), CALL, now=NOW))[0] is Outcome.ALLOW
        )
    finally:
        store.close()
    assert os.path.exists(tmp_path / "e.db")


def test_chain_cache_is_bounded_in_entries_and_bytes(local: GrantRepository) -> None:
    cache = ChainCache(size=2, max_bytes=10**9)
    chains = [chain3() for _ in range(3)]
    for chain in chains:
        assert decide(Invocation.sign(CAROL, chain, CALL, now=NOW), repo=local, trusted=ROOT.public,
                      now=NOW, cache=cache).allowed  # fmt: skip
    anchors = frozenset({ROOT.did})
    assert cache.get(anchors, chains[0].token) is None
    assert cache.get(anchors, chains[2].token) == chains[2]
    small = ChainCache(size=100, max_bytes=chain_weight(chains[0].token, chains[0]) + 10)
    small.put(anchors, chains[0].token, chains[0])
    small.put(anchors, chains[1].token, chains[1])
    assert small.get(anchors, chains[0].token) is None and small.get(anchors, chains[1].token) == chains[1]


def test_a_grant_holds_at_most_16_capabilities() -> None:
    from agentgate.errors import TokenFormatError

    with pytest.raises(TokenFormatError, match="16"):
        issue(ROOT, ALICE.did, [f"tool:t{i}" for i in range(17)], ttl=60, now=NOW)


def test_durable_nonces_refuse_replays_too(store: Store) -> None:
    repo = GrantRepository(store, durable_nonces=True)
    inv = Invocation.sign(CAROL, chain3(), CALL, now=NOW)
    assert run(repo, inv) == (Outcome.ALLOW, None)
    assert run(repo, inv) == (Outcome.DENY, "replayed_invocation")
    if isinstance(store, SQLiteStore):
        assert repo._hot is not None and repo._hot.execute("PRAGMA synchronous").fetchone() == (2,)


def test_a_failing_approval_hook_fails_closed(local: GrantRepository) -> None:
    def hook(call: Call, chain: Chain, invocation: Invocation) -> ApprovalRequirement | None:
        raise RuntimeError("approvals database is down")

    d = Authority(local, ROOT.public, approvals=hook).decide(
        Invocation.sign(CAROL, chain3(), CALL, now=NOW), now=NOW
    )
    assert d.outcome is Outcome.DENY and d.findings[0].code == "approval_check_failed"
    # Review R65b: the hook's error text is logged (agentgate.authority), not quoted.
    assert "(RuntimeError)" in d.findings[0].message
    assert "approvals database is down" not in d.findings[0].message


@pytest.mark.parametrize("answer", [False, True, 0, "alice", {"approvers": ["alice"]}])
def test_an_approval_hook_answering_neither_none_nor_a_requirement_fails_closed(
    local: GrantRepository, answer: object
) -> None:
    """Review R56: a hook that answered False (meaning "no approval needed"), a name or a dict
    made decide and decide_held raise AttributeError ('bool' object has no attribute
    'approvers'). Rule: only None or an ApprovalRequirement is an answer; anything else is a
    deny (approval_check_failed) naming what it answered, and no nonce is recorded."""
    authority = Authority(local, ROOT.public, approvals=lambda call, chain, invocation: answer)
    before = _nonce_count(local)
    for d in (
        authority.decide(Invocation.sign(CAROL, chain3(), CALL, now=NOW), now=NOW),
        authority.decide_held(CAROL, chain3(), CALL, now=NOW),
    ):
        assert d.outcome is Outcome.DENY and d.findings[0].code == "approval_check_failed"
        assert f"answered a {type(answer).__name__}" in d.findings[0].message
    assert _nonce_count(local) == before


# --- decide_held: the caller holds the holder's key (the Gate) --------------------------------


def _nonce_count(repo: GrantRepository) -> int:
    return int(repo.store.query("SELECT COUNT(*) FROM agentgate_nonces")[0][0])


def test_a_held_decision_allows_with_the_same_evidence_and_records_no_nonce(repo: GrantRepository) -> None:
    chain = chain3()
    signed = decide(Invocation.sign(CAROL, chain, CALL, now=NOW), repo=repo, trusted=ROOT.public, now=NOW)
    before = _nonce_count(repo)
    held = Authority(repo, ROOT.public).decide_held(CAROL, chain, CALL, now=NOW)
    assert held.allowed and held.invocation_id is None and _nonce_count(repo) == before
    for field in ("principal", "resource", "action", "args_digest", "chain", "budgets"):
        assert getattr(held, field) == getattr(signed, field), field
    # again and again: nothing to replay without a signed invocation
    assert Authority(repo, ROOT.public).decide_held(CAROL, chain.token, CALL, now=NOW).allowed


def test_a_held_decision_binds_the_key_to_the_chains_holder(local: GrantRepository) -> None:
    chain = chain3()
    for other in (BOB, ALICE, SigningKey.generate()):
        d = Authority(local, ROOT.public).decide_held(other, chain, CALL, now=NOW)
        assert (d.outcome, d.findings[0].kind, d.findings[0].code) == (
            Outcome.DENY, FindingKind.IMPLICIT_TRUST_INHERITANCE, "wrong_holder")  # fmt: skip


def test_a_held_decision_reads_the_chain_from_its_token_not_the_objects_fields(
    local: GrantRepository,
) -> None:
    # A Chain whose links claim CAROL holds it, but whose token is BOB's chain: the token decides.
    carol, bob = chain3(), issue(ROOT, BOB.did, ["tool:payments.refund"], ttl=3600, now=NOW)
    forged = Chain(carol.links, bob.token)
    d = Authority(local, ROOT.public).decide_held(CAROL, forged, CALL, now=NOW)
    assert d.findings[0].code == "tip_mismatch"  # its caller would budget and audit other grants
    d = Authority(local, ROOT.public).decide_held(CAROL, bob.token, CALL, now=NOW)  # the token alone
    assert d.findings[0].code == "wrong_holder"
    swapped = Chain(bob.links, carol.token)  # the token is CAROL's, the links another chain's
    assert (
        Authority(local, ROOT.public).decide_held(CAROL, swapped, CALL, now=NOW).findings[0].code
        == "tip_mismatch"
    )
    d = Authority(local, ROOT.public).decide_held(CAROL, carol.token[:-4] + "AAAA", CALL, now=NOW)
    assert d.outcome is Outcome.DENY and d.findings[0].kind is FindingKind.AUTHORITY_CHAIN_OPACITY


def test_a_held_decision_checks_scope_times_and_names(local: GrantRepository) -> None:
    chain = chain3()
    authority = Authority(local, ROOT.public)
    over = Call.tool("payments.refund", {"amount": 61, "currency": "EUR"})
    assert authority.decide_held(CAROL, chain, over, now=NOW).findings[0].kind is FindingKind.SCOPE_CREEP
    assert authority.decide_held(CAROL, chain, CALL, now=NOW + 600).findings[0].code == "grant_expired"
    odd = Call("tool:payments.Refund", "invoke", {"amount": 1, "currency": "EUR"})
    assert authority.decide_held(CAROL, chain, odd, now=NOW).findings[0].code == "ambiguous_resource"


def test_a_held_decision_sees_revocation_and_fails_closed(store: Store) -> None:
    repo = GrantRepository(store)
    chain = chain3()
    record(repo, chain, now=NOW)
    assert Authority(repo, ROOT.public).decide_held(CAROL, chain, CALL, now=NOW).allowed
    revoke(repo, chain.links[1].id, now=NOW)
    d = Authority(repo, ROOT.public).decide_held(CAROL, chain, CALL, now=NOW)
    assert (d.outcome, d.findings[0].code, d.findings[0].grant) == (
        Outcome.DENY,
        "revoked",
        chain.links[1].id,
    )
    repo.close()
    store.close()
    d = Authority(repo, ROOT.public).decide_held(CAROL, chain, CALL, now=NOW)
    assert (d.outcome, d.findings[0].code) == (Outcome.DENY, "revocation_unreachable")


def test_a_held_decision_asks_the_approval_hook_without_an_invocation(local: GrantRepository) -> None:
    seen: list[object] = []

    def hook(call: Call, chain: Chain, invocation: Invocation | None) -> ApprovalRequirement:
        seen.append(invocation)
        return ApprovalRequirement(("lead",))

    d = Authority(local, ROOT.public, approvals=hook).decide_held(CAROL, chain3(), CALL, now=NOW)
    assert d.outcome is Outcome.APPROVAL_REQUIRED and seen == [None]


# --- decisions on hand-made chains: time bounds, replay, revocation, coverage ----------------------


PAY_CALL = Call.tool("pay", {"amount": 50})


def _decide_at(
    repo: GrantRepository, chain: Any, signer: SigningKey, at: int, signed_at: int, **kw: Any
) -> tuple[Outcome, str | None]:
    inv = Invocation.sign(signer, chain, PAY_CALL, now=signed_at)
    d = decide(inv, repo=repo, trusted=ROOT_KEY.public, now=at, cache=ChainCache(), **kw)
    return d.outcome, (d.findings[0].code if d.findings else None)


def _two_links(tip_start: int = NOW, tip_ttl: int = 60) -> Any:
    root = issue(ROOT_KEY, ALICE_KEY.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW)
    return delegate(root, ALICE_KEY, BOB_KEY.did, ["tool:pay?amount<=100"], ttl=tip_ttl, now=tip_start)


def test_a_chain_is_dead_once_its_shortest_lived_link_expires(local: GrantRepository) -> None:
    """Mutants: ``Chain.expires`` the latest link expiry (``max``), or the quick time check in
    ``_conclude`` letting ``t == expires`` through. Rule: a chain is dead from the earliest expiry
    of any link, exactly at that second (no tolerance on expiry)."""
    chain = _two_links(tip_ttl=60)
    assert chain.expires == NOW + 60
    assert _decide_at(local, chain, BOB_KEY, NOW + 59, NOW + 59) == (Outcome.ALLOW, None)
    assert _decide_at(local, chain, BOB_KEY, NOW + 60, NOW + 60) == (Outcome.DENY, "grant_expired")
    assert _decide_at(local, chain, BOB_KEY, NOW + 600, NOW + 600) == (Outcome.DENY, "grant_expired")


def test_a_chain_starts_when_its_latest_starting_link_starts_less_the_skew(local: GrantRepository) -> None:
    """Mutants: ``Chain.not_before`` the earliest link start (``min``), or the not-before
    tolerance widened by one second. Rule: valid from the latest not-before minus the skew (30 s)."""
    chain = _two_links(tip_start=NOW + 1000, tip_ttl=600)
    assert chain.not_before == NOW + 1000
    assert _decide_at(local, chain, BOB_KEY, NOW + 969, NOW + 969) == (Outcome.DENY, "grant_not_yet_valid")
    assert _decide_at(local, chain, BOB_KEY, NOW + 970, NOW + 970) == (Outcome.ALLOW, None)


def test_an_invocation_is_dead_at_its_expiry_second(local: GrantRepository) -> None:
    """Mutant: ``t > inv.expires`` for ``t >= inv.expires``. Rule: an invocation signed with ttl 60
    at T is refused from T + 60 on."""
    chain = _two_links(tip_ttl=600)
    inv = Invocation.sign(BOB_KEY, chain, PAY_CALL, now=NOW, ttl=60)
    at_expiry = decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 60, cache=ChainCache())
    assert at_expiry.findings[0].code == "invocation_expired"
    assert decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 59, cache=ChainCache()).allowed


def test_an_invocation_dated_more_than_the_skew_ahead_is_refused(local: GrantRepository) -> None:
    """Mutant: the issued-at tolerance widened by a second. Rule: iat <= now + skew."""
    chain = _two_links(tip_ttl=600)
    assert _decide_at(local, chain, BOB_KEY, NOW + 100, NOW + 131) == (
        Outcome.DENY,
        "invocation_not_yet_valid",
    )
    assert _decide_at(local, chain, BOB_KEY, NOW + 100, NOW + 130) == (Outcome.ALLOW, None)


def test_a_nonce_is_spent_for_verifiers_of_any_skew_sharing_the_store(local: GrantRepository) -> None:
    """Mutant: the nonce keyed by the signed expiry plus this verifier's skew instead of the fixed
    30 s. Rule: one invocation is allowed once across every verifier sharing a nonce table."""
    chain = _two_links(tip_ttl=600)
    inv = Invocation.sign(BOB_KEY, chain, PAY_CALL, now=NOW)
    first = decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, skew=30, cache=ChainCache())
    again = decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, skew=120, cache=ChainCache())
    assert first.allowed
    assert again.findings[0].code == "replayed_invocation"


@pytest.mark.parametrize("skew", [float("nan"), float("inf"), 30.0, "30", None, -1, True, 3601, 10**12])
def test_a_clock_tolerance_that_is_not_whole_seconds_is_refused_when_configured(
    local: GrantRepository, skew: object
) -> None:
    """``verify_chain`` refused such a ``skew``; ``decide`` and ``Authority`` took it, and a NaN
    (false against every time) allowed a grant that starts in three hours, by an invocation dated
    then. Rule: the tolerance is a whole number of seconds, 0 or more, or nothing is decided."""
    later = issue(ROOT, ALICE.did, ["tool:payments.refund"], ttl=3600, now=NOW + 10_800)
    inv = Invocation.sign(ALICE, later, CALL, now=NOW + 10_800)
    assert run(local, inv) == (Outcome.DENY, "invocation_not_yet_valid")
    with pytest.raises(InputError, match="skew must be a whole number of seconds"):
        Authority(local, ROOT.public, skew=skew)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="skew must be a whole number of seconds"):
        run(local, inv, skew=skew)
    assert run(local, inv, skew=0) == (Outcome.DENY, "invocation_not_yet_valid")


@pytest.mark.parametrize("skew", [float("nan"), -1, 10**12])
def test_an_authoritys_clock_tolerance_cannot_be_changed_after_it_was_checked(
    local: GrantRepository, skew: object
) -> None:
    """R53: ``Authority.skew`` was checked when the engine was made, then a plain attribute: set to
    ``10**12`` it allowed an invocation dated three hours ahead; to -1 it refused calls made now."""
    later = issue(ROOT, ALICE.did, ["tool:payments.refund"], ttl=3600, now=NOW + 10_800)
    engine = Authority(local, ROOT.public)
    with pytest.raises(AttributeError):
        engine.skew = skew  # type: ignore[misc]
    assert engine.skew == 30
    early = engine.decide(Invocation.sign(ALICE, later, CALL, now=NOW + 10_800), now=NOW + 1)
    assert early.findings[0].code == "invocation_not_yet_valid"


def test_a_call_made_without_the_holders_private_key_is_decided_at_the_time_given(
    local: GrantRepository,
) -> None:
    """``decide_held`` with a public key (``holder_key_missing``) stamped the wall clock as its
    ``decided_at`` whatever ``now`` was given, and took a NaN ``now``, which every other decision
    refuses. Rule: a decision is made at ``now``, and a ``now`` that is no time is a caller's bug."""
    authority = Authority(local, ROOT.public)
    decision = authority.decide_held(CAROL.public, chain3(), CALL, now=NOW + 5)  # type: ignore[arg-type]
    assert (decision.findings[0].code, decision.decided_at) == ("holder_key_missing", NOW + 5)
    with pytest.raises(InputError, match="now must be a finite number"):
        authority.decide_held(CAROL.public, chain3(), CALL, now=float("nan"))  # type: ignore[arg-type]


def test_revoking_the_root_kills_the_tip_signed_and_held(local: GrantRepository) -> None:
    """Mutants: revocation read for the tip's id only (signed path, or held path). Rule: every grant
    below a revoked grant is dead."""
    chain = _two_links(tip_ttl=600)
    revoke(local, chain.root.id, now=NOW)
    assert _decide_at(local, chain, BOB_KEY, NOW + 1, NOW + 1) == (Outcome.DENY, "revoked")
    held = Authority(local, ROOT_KEY.public).decide_held(BOB_KEY, chain, PAY_CALL, now=NOW + 1)
    assert held.findings[0].code == "revoked" and held.findings[0].grant == chain.root.id


def test_the_tip_capabilities_decide_not_the_roots(local: GrantRepository) -> None:
    """Mutant: coverage checked against the root's capabilities. Rule: the holder has only what
    its own grant (the tip) names."""
    chain = _two_links(tip_ttl=600)
    inv = Invocation.sign(BOB_KEY, chain, Call.tool("pay", {"amount": 300}), now=NOW)
    d = decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache())
    assert d.findings[0].code == "call_not_covered"


def test_a_signed_invocation_living_longer_than_five_minutes_is_refused(local: GrantRepository) -> None:
    """Mutant: ``_decide`` checks only ``0 < exp - iat`` (drops ``<= 300``). Rule: an invocation
    lives 1 to 300 s, also one built in Python, whose nonce would otherwise be kept as long as
    it claims to live."""
    chain = _two_links(tip_ttl=600)
    long = replace(Invocation.sign(BOB_KEY, chain, PAY_CALL, now=NOW), expires=NOW + 301)
    long = replace(long, signature=BOB_KEY.sign(INVOCATION_CONTEXT + long.payload))
    d = decide(long, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache())
    assert d.findings[0].code == "invocation_lifetime"


# --- the invocation wire form --------------------------------------------------------------------


def _signed() -> tuple[Any, Invocation]:
    chain = issue(ROOT_KEY, ALICE_KEY.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW)
    return chain, Invocation.sign(ALICE_KEY, chain, PAY_CALL, now=NOW)


def _wire(payload: bytes, signer: SigningKey = ALICE_KEY) -> str:
    return f"agi1.{b64url_encode(payload)}.{b64url_encode(signer.sign(INVOCATION_CONTEXT + payload))}"


def test_the_wire_form_round_trips() -> None:
    """The baseline of the refusals below: the signed invocation decodes to itself."""
    chain, inv = _signed()
    assert Invocation.decode(inv.encode(), chain, PAY_CALL) == inv
    assert Invocation.decode(_wire(canonical_json(json.loads(inv.payload))), chain, PAY_CALL) == inv


@pytest.mark.parametrize(
    "change",
    [
        {"exp": NOW + 301},  # lives 301 s
        {"v": True},  # true is not version 1
        {"extra": 1},  # a field beside the nine
        {"iss": "did:key:z6MkNotAKey"},  # an issuer that is no Ed25519 did:key
    ],
    ids=["lifetime-301", "version-true", "extra-field", "issuer-not-a-key"],
)
def test_an_invocation_outside_the_format_is_refused_on_decoding(change: dict[str, Any]) -> None:
    """Mutants: the lifetime cap dropped from the reference decoder, or widened by a second in the
    fast one; ``v: true`` taken as version 1 (reference decoder); a superset of the fields
    accepted (reference decoder); the fast decoder no longer checking the issuer is a did:key.
    Rule: ``Invocation.decode`` accepts exactly the format (1 to 300 s, version the integer 1,
    exactly the nine fields, an Ed25519 did:key issuer) and raises ``TokenFormatError`` else."""
    chain, inv = _signed()
    obj = {**json.loads(inv.payload), **change}
    with pytest.raises(TokenFormatError):
        Invocation.decode(_wire(canonical_json(obj)), chain, PAY_CALL)


def test_an_invocation_payload_not_in_canonical_form_is_refused_on_decoding() -> None:
    """Mutant: the fast decoder drops its check that orjson's sorted re-encoding is the payload.
    Rule: one spelling of each invocation (its id is the hash of the bytes): a payload with a
    space or its keys out of order is refused, not taken as the same invocation."""
    chain, inv = _signed()
    obj = json.loads(inv.payload)
    for payload in (
        json.dumps(obj, sort_keys=True).encode(),  # ", " and ": " separators
        json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":")).encode(),
    ):
        assert payload != inv.payload
        with pytest.raises(TokenFormatError):
            Invocation.decode(_wire(payload), chain, PAY_CALL)


# --- an invocation binds its grant and its action --------------------------------------------------


def test_an_invocation_signed_for_one_grant_is_refused_with_another(local: GrantRepository) -> None:
    """Mutant: ``_decide`` drops the ``inv.tip != tip.id`` check. Rule: an invocation binds the
    grant it was signed under; carried beside another chain of the same holder (one that covers
    the call too) it is refused as ``tip_mismatch``, never decided under the other grant."""
    signed_under = issue(ROOT_KEY, ALICE_KEY.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW)
    other = issue(ROOT_KEY, ALICE_KEY.did, ["tool:pay?amount<=900"], ttl=3600, now=NOW)
    inv = Invocation.sign(ALICE_KEY, signed_under, PAY_CALL, now=NOW)
    assert decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache()).allowed
    moved = replace(Invocation.sign(ALICE_KEY, signed_under, PAY_CALL, now=NOW), chain_token=other.token)
    d = decide(moved, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache())
    assert not d.allowed and d.findings[0].code == "tip_mismatch"


def test_an_invocation_signed_for_one_action_is_refused_for_another(local: GrantRepository) -> None:
    """Mutant: ``_decide`` compares the call's resource with the signed one but not its action.
    Rule: under a grant for every action (``#*``), an invocation signed for ``invoke`` does not
    authorize ``refund`` of the same tool with the same arguments: ``call_mismatch``."""
    chain = issue(ROOT_KEY, ALICE_KEY.did, ["tool:pay#*?amount<=500"], ttl=3600, now=NOW)
    inv = Invocation.sign(ALICE_KEY, chain, PAY_CALL, now=NOW)
    other_action = replace(inv, call=Call("tool:pay", "refund", {"amount": 50}))
    d = decide(other_action, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache())
    assert not d.allowed and d.findings[0].code == "call_mismatch"
    assert decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache()).allowed


def test_the_call_must_have_the_action_that_was_signed(local: GrantRepository) -> None:
    """Kills D3 (``_decide`` compares only the resource with the signed one, not the action): under
    a grant for every action (``#*``), an invocation signed for ``read`` would let a relay run
    ``delete`` with the holder's signature."""
    chain = issue(ROOT_KEY, ALICE_KEY.did, ["tool:files.report#*"], ttl=3600, now=NOW)
    signed = Invocation.sign(ALICE_KEY, chain, Call("tool:files.report", "read", {}), now=NOW)
    ok = decide(signed, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache())
    assert ok.outcome is Outcome.ALLOW
    moved = dataclasses.replace(signed, call=Call("tool:files.report", "delete", {}))
    d = decide(moved, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache())
    assert d.outcome is Outcome.DENY and d.findings[0].code == "call_mismatch"


def test_a_child_valid_from_later_than_its_root_is_not_yet_valid(local: GrantRepository) -> None:
    """Kills G18 (``Chain.not_before`` is the earliest link's, not the latest's): ``_conclude``
    then skipped ``time_finding`` for a chain whose root is valid but whose tip is not yet."""
    root = _refund_root()
    later = delegate(
        root, ALICE_KEY, BOB_KEY.did, ["tool:payments.refund?amount<=100"], ttl=600, now=NOW + 100
    )
    assert later.tip.not_before == NOW + 100 and later.not_before == NOW + 100
    call = Call.tool("payments.refund", {"amount": 5})
    assert _decide(local, BOB_KEY, later, call, now=NOW + 69) == (Outcome.DENY, "grant_not_yet_valid")
    assert _decide(local, BOB_KEY, later, call, now=NOW + 70)[0] is Outcome.ALLOW  # within the 30 s skew


def test_an_invocation_is_bound_to_the_tip_it_was_signed_for(local: GrantRepository) -> None:
    """Kills D2 (``_decide`` skips ``inv.tip != tip.id``): an invocation that BOB signed under one
    chain would be accepted with another chain BOB also holds, which BOB never chose to use."""
    root = _refund_root()
    narrow = delegate(root, ALICE_KEY, BOB_KEY.did, ["tool:payments.refund?amount<=100"], ttl=600, now=NOW)
    other = delegate(root, ALICE_KEY, BOB_KEY.did, ["tool:payments.refund?amount<=300"], ttl=600, now=NOW)
    signed = Invocation.sign(BOB_KEY, narrow, Call.tool("payments.refund", {"amount": 5}), now=NOW)
    moved = dataclasses.replace(signed, chain_token=other.token)
    d = decide(moved, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, cache=ChainCache())
    assert d.outcome is Outcome.DENY and d.findings[0].code == "tip_mismatch"


def test_an_invocation_dated_just_beyond_the_skew_is_not_yet_valid(local: GrantRepository) -> None:
    """Kills D7 (``inv.issued_at > t + skew + 1``): the tolerance on a caller's clock is exactly
    ``skew`` seconds."""
    chain = _refund_root()
    call = Call.tool("payments.refund", {"amount": 5})
    t = NOW + 100
    for dated, expected in (
        (t + 30, (Outcome.ALLOW, None)),
        (t + 31, (Outcome.DENY, "invocation_not_yet_valid")),
    ):
        inv = Invocation.sign(ALICE_KEY, chain, call, now=dated)
        d = decide(inv, repo=local, trusted=ROOT_KEY.public, now=t, cache=ChainCache())
        assert (d.outcome, d.findings[0].code if d.findings else None) == expected


def test_verifiers_with_different_skews_share_one_nonce_per_invocation(local: GrantRepository) -> None:
    """Kills D14 (the nonce row keyed by ``inv.expires + skew``, the verifier's own tolerance,
    instead of the fixed ``DEFAULT_SKEW``): the nonce table's key holds the expiry, so two
    verifiers configured with different skews over one store each accepted the same invocation
    once: a replay."""
    chain = _refund_root()
    inv = Invocation.sign(ALICE_KEY, chain, Call.tool("payments.refund", {"amount": 5}), now=NOW)
    first = decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, skew=30, cache=ChainCache())
    again = decide(inv, repo=local, trusted=ROOT_KEY.public, now=NOW + 1, skew=60, cache=ChainCache())
    assert first.outcome is Outcome.ALLOW
    assert again.outcome is Outcome.DENY and again.findings[0].code == "replayed_invocation"
