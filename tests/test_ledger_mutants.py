"""Grants, revocations, nonces and approvals in the store (agentgate/store/grants.py,
approvals.py): each test names the hand-made mutant it kills (what the mutant did) and the rule
it pins. Every test runs on SQLite and on PostgreSQL (the ``store`` fixture), except where said."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from agentgate.errors import Denied, Expired, Revoked
from agentgate.store import Store
from agentgate.store import grants as grants_module
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.grants import GrantRepository

# --- grants, revocations, nonces -------------------------------------------------------------


AGENT = "did:key:zAgent"
ALICE = "did:key:zAlice"
BOB = "did:key:zBob"


def _grant(
    gid: str, parent: str | None, audience: str, expires: int
) -> tuple[str, str | None, str, str, int, str]:
    return (gid, parent, "did:key:zIssuer", audience, expires, f"token-{gid}")


def test_revoke_holder_revokes_every_grant_past_a_chunk_boundary(store: Store) -> None:
    """Mutant: ``revoke_holder`` wrote its revocations in chunks of 199 of every 200 ids.

    Rule: revoking a holder revokes every grant recorded to it, however many; none is left
    live (e.g. the 200th of 401)."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        ids = [f"{i:064x}" for i in range(401)]
        repo.record_grants([_grant(g, None, AGENT, now + 3600) for g in ids], now=now)
        revoked, already = repo.revoke_holder(AGENT, now=now, reason="key lost")
        assert revoked == sorted(ids) and already == []
        assert repo.revoked(ids) == set(ids)
        for i, gid in enumerate(ids):
            assert repo.consume_nonce(AGENT, f"n{i}", now + 60, [gid]) == "revoked"
    finally:
        repo.close()


def test_a_revoked_ancestor_refuses_every_chain_below_it(store: Store) -> None:
    """Mutant: the nonce statement checked only the tip of the chain for revocation.

    Rule: a revocation cascades: once a grant is revoked, a chain through any descendant of it
    is refused in the nonce statement itself, and the nonce is not recorded."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        assert repo.revoke("a" * 64, now=now)
        chain = ["a" * 64, "b" * 64, "c" * 64]
        assert repo.consume_nonce(AGENT, "n1", now + 60, chain) == "revoked"
        assert repo.consume_nonce(AGENT, "n1", now + 60, chain[1:]) == "fresh"  # nothing was recorded
        assert repo.consume_nonce(AGENT, "n1", now + 60, chain[1:]) == "replay"
        assert repo.consume_nonce(AGENT, "n2", now + 60, chain[1:]) == "fresh"
        assert repo.revoke("b" * 64, now=now) and not repo.revoke("b" * 64, now=now)
        assert repo.consume_nonce(AGENT, "n3", now + 60, chain[1:]) == "revoked"
    finally:
        repo.close()


def test_descendants_lists_every_generation_nearest_first(store: Store) -> None:
    """Mutant: the recursive query stopped after the children (``level < 2`` for ``< 64``).

    Rule: ``descendants`` (what ``agentgate grant revoke`` shows as cut off with a grant) lists
    children, grandchildren and further down, nearest first."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        ids = [f"{c}" * 64 for c in "0123"]
        repo.record_grants(
            [_grant(ids[0], None, AGENT, now + 100)]
            + [_grant(ids[i], ids[i - 1], AGENT, now + 100) for i in range(1, 4)],
            now=now,
        )
        assert repo.descendants(ids[0]) == ids[1:]
        assert repo.descendants(ids[2]) == ids[3:]
    finally:
        repo.close()


def test_a_live_nonce_survives_the_prune_of_a_new_process(store: Store) -> None:
    """Mutant: nonces were pruned up to an hour after now instead of an hour before.

    Rule: a nonce is kept until its invocation expired over an hour ago; a second process,
    which prunes on its first nonce, must still see a live invocation's nonce as a replay."""
    first = GrantRepository(store)
    second = GrantRepository(store)
    try:
        now = int(time.time())
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "fresh"
        assert second.consume_nonce(AGENT, "other", now + 600, ["g"]) == "fresh"  # prunes
        assert second.consume_nonce(AGENT, "live", now + 600, ["g"]) == "replay"
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "replay"
    finally:
        first.close()
        second.close()


@pytest.mark.postgres
def test_a_host_clock_ahead_never_prunes_a_live_nonce_on_postgresql(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutant: PostgreSQL's prune bound took the server's clock plus an hour, not minus.

    Rule: hosts share one nonce table on PostgreSQL; a host whose clock runs two hours ahead
    prunes up to the earlier of its own cut and the server's (now - 1 h), so the nonce of an
    invocation still live elsewhere stays and its replay is refused. (A SQLite file has one
    host: not tested there.)"""
    from agentgate.store._postgres import PostgresStore

    store = PostgresStore(postgres_url)
    first = GrantRepository(store)
    ahead = GrantRepository(store)
    try:
        now = int(time.time())
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "fresh"
        real = time.time
        monkeypatch.setattr(grants_module, "time", SimpleNamespace(time=lambda: real() + 7200))
        assert ahead.consume_nonce(AGENT, "other", now + 7800, ["g"]) == "fresh"  # prunes
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "replay"
    finally:
        first.close()
        ahead.close()
        store.close()


def test_delegated_names_only_unexpired_grants_to_that_audience(store: Store) -> None:
    """Mutants: ``delegated`` ignored the audience, or kept a grant whose expiry is now.

    Rule: a grant handed on again is one delegated from that parent to that very holder and
    still valid (a grant is valid strictly before its ``exp``)."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        repo.record_grants(
            [
                _grant("p" * 64, None, AGENT, now + 100),
                _grant("1" * 64, "p" * 64, ALICE, now + 100),
                _grant("2" * 64, "p" * 64, BOB, now + 100),
                _grant("3" * 64, "p" * 64, ALICE, now),
            ],
            now=now,
        )
        assert repo.delegated("p" * 64, ALICE, now=now) == ["token-" + "1" * 64]
        assert repo.delegated("p" * 64, BOB, now=now) == ["token-" + "2" * 64]
        assert repo.delegated("p" * 64, AGENT, now=now) == []
    finally:
        repo.close()


# --- approvals -------------------------------------------------------------------------------


def test_an_approval_reaching_its_expiry_takes_no_vote_and_is_not_used(store: Store) -> None:
    """Mutants: the vote and the use took ``expires_at >= now`` for ``expires_at > now``.

    Rule: a request expires at its ``expires_at``: at that very moment a yes is refused as
    expired and an approved request can no longer be used."""
    approvals = ApprovalStore(store)
    at = time.time() + 60
    pending = approvals.request("call-1", AGENT, at)
    with pytest.raises(Expired):
        approvals.approve(pending, ALICE, now=at)
    assert approvals.approvers(pending) == ()
    approved = approvals.request("call-2", AGENT, at)
    approvals.approve(approved, ALICE, now=at - 1)
    with pytest.raises(Expired):
        approvals.consume(approved, "call-2", now=at)
    assert approvals.get(approved).state == "approved"


def test_an_approval_used_under_a_rule_is_never_used_again(store: Store) -> None:
    """Mutant: the re-count under the policy's rule also reopened consumed (and denied) requests.

    Rule: an approval is used once, for its call; using it again under the policy in force
    finds it consumed, and a denied one stays denied."""
    approvals = ApprovalStore(store)
    rule = QuorumRule(1, frozenset({ALICE}))
    request = approvals.request("call-1", AGENT, time.time() + 60)
    approvals.approve(request, ALICE, rule=rule)
    assert approvals.consume(request, "call-1", rule=rule) == (ALICE,)
    with pytest.raises(Denied, match="already used"):
        approvals.consume(request, "call-1", rule=rule)
    assert approvals.get(request).state == "consumed"
    refused = approvals.request("call-3", AGENT, time.time() + 60)
    approvals.deny(refused, BOB)
    with pytest.raises(Denied, match="denied"):
        approvals.consume(refused, "call-3", rule=QuorumRule(1, frozenset({BOB})))
    assert approvals.get(refused).state == "denied"


def test_a_yes_for_another_call_is_not_counted(store: Store) -> None:
    """Mutant: a vote given with ``call_hash`` counted whatever call the request was for.

    Rule: an approver's yes is bound to the call it was given for; a yes for another call is
    refused and recorded nowhere."""
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", AGENT, time.time() + 60)
    with pytest.raises(Denied, match="another call"):
        approvals.approve(request, ALICE, call_hash="call-1-edited")
    assert approvals.approvers(request) == ()
    assert approvals.get(request).state == "pending"


def test_the_requester_cannot_deny_its_own_request(store: Store) -> None:
    """Mutant: ``deny`` dropped ``requester <> approver``.

    Rule: the requester is no approver: it can neither approve nor deny its own request."""
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", AGENT, time.time() + 60)
    with pytest.raises(Denied, match="requester"):
        approvals.deny(request, AGENT)
    assert approvals.get(request).state == "pending"


def test_rearm_clears_the_votes_and_only_rearms_that_consumed_call(store: Store) -> None:
    """Mutants: ``rearm`` kept the old votes, re-armed a denied request, or re-armed for any call.

    Rule: re-arming puts back to pending only a consumed request, only for its own call, with
    its votes cleared, so the quorum must be reached again."""
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", AGENT, time.time() + 60, quorum=2)
    approvals.approve(request, ALICE)
    approvals.approve(request, BOB)
    approvals.consume(request, "call-1")
    assert not approvals.rearm(request, "call-2")
    assert approvals.get(request).state == "consumed"
    assert approvals.rearm(request, "call-1")
    assert approvals.approvers(request) == ()
    approvals.approve(request, ALICE)
    assert approvals.get(request).state == "pending"
    with pytest.raises(Denied, match="pending"):
        approvals.consume(request, "call-1")
    denied = approvals.request("call-3", AGENT, time.time() + 60)
    approvals.deny(denied, ALICE)
    assert not approvals.rearm(denied, "call-3")
    assert approvals.get(denied).state == "denied"


def test_a_used_approval_takes_no_further_vote(store: Store) -> None:
    """Mutant: a vote was taken on a consumed request (``state IN (..., 'consumed')``).

    Rule: once used, an approval is closed: a late yes is refused as such and not recorded."""
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", AGENT, time.time() + 60)
    approvals.approve(request, ALICE)
    approvals.consume(request, "call-1")
    with pytest.raises(Denied, match="already used"):
        approvals.approve(request, BOB)
    assert approvals.approvers(request) == (ALICE,)


def test_a_vote_under_a_rule_counts_only_the_rules_voters(store: Store) -> None:
    """Mutant: the quorum check after a vote counted every vote, ignoring the rule's voters.

    Rule: under the policy in force only its approvers count: an approver since removed (here
    CAROL, who voted before the policy changed) cannot complete a quorum with one of the others."""
    approvals = ApprovalStore(store)
    carol = "did:key:zCarol"
    rule = QuorumRule(2, frozenset({ALICE, BOB}))
    request = approvals.request("call-1", AGENT, time.time() + 60, quorum=2)
    approvals.approve(request, carol)
    approvals.approve(request, ALICE, rule=rule)
    assert approvals.get(request).state == "pending"
    assert approvals.votes(request) == ((ALICE,), (carol,))
    approvals.approve(request, BOB, rule=rule)
    assert approvals.get(request).state == "approved"
    assert approvals.consume(request, "call-1", rule=rule) == (ALICE, BOB)


def test_an_approved_request_whose_ancestor_grant_is_revoked_is_not_used(store: Store) -> None:
    """Mutant: ``consume`` dropped the condition that no grant of the request is revoked.

    Rule: a request is void once any grant of its call's chain is revoked, even after it was
    approved: using it raises ``Revoked`` and it is not consumed."""
    approvals = ApprovalStore(store)
    repo = GrantRepository(store)
    try:
        chain = ["a" * 64, "b" * 64]
        request = approvals.request("call-1", AGENT, time.time() + 60, grants=chain)
        approvals.approve(request, ALICE)
        repo.revoke(chain[0], now=int(time.time()))
        with pytest.raises(Revoked, match="a" * 64):
            approvals.consume(request, "call-1")
        assert approvals.get(request).state == "approved"
    finally:
        repo.close()


def test_an_open_request_is_found_only_for_its_requester(store: Store) -> None:
    """Mutant: ``open_for`` dropped ``requester = ?``.

    Rule: a process asking again finds the open request that same requester asked for that
    call, never another requester's (whose approval it would then use)."""
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", AGENT, time.time() + 60)
    assert approvals.open_for("call-1", ALICE) is None
    found = approvals.open_for("call-1", AGENT)
    assert found is not None and found[0] == request
