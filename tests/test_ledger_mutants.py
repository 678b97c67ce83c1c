"""Review R47 (mutation, shared store state): budgets, grants and nonces, approvals.

Each test names the hand-made mutant of agentgate/store/ledger.py, grants.py or approvals.py it
kills (what the mutant did) and the rule it pins. Every test runs on SQLite and on PostgreSQL
(the ``store`` fixture), except where said.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from agentgate.errors import BudgetExceeded, Denied, Expired, InputError, Revoked
from agentgate.store import Store
from agentgate.store import grants as grants_module
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.grants import GrantRepository
from agentgate.store.ledger import MAX_AMOUNT, BudgetLedger

AGENT = "did:key:zAgent"
ALICE = "did:key:zAlice"
BOB = "did:key:zBob"

# --- budgets ---------------------------------------------------------------------------------


def test_an_exhausted_overrun_returns_the_largest_shortfall_of_the_chain(store: Store) -> None:
    """Mutant: ``shortfall`` took the last grant's shortfall instead of the largest (max).

    Rule: what a call cost beyond its budgets is the most any grant of its chain could not
    cover; a later link that covered more must not hide the root's larger shortfall."""
    ledger = BudgetLedger(store)
    held = ledger.reserve(None, ["root", "tip"], {"root": 10, "tip": 12}, 5)
    # Overrun of 15: the root has 5 left (short by 10), the tip 7 (short by 8).
    assert ledger.commit(held, 20, exhaust=True) == 10
    assert [ledger.remaining(g) for g in ("root", "tip")] == [0, 0]


def test_an_exhausted_overrun_counts_the_reservation_and_the_rest_as_spent(store: Store) -> None:
    """Mutant: the exhaust path added only the overrun charged to ``spent``, not the reservation.

    Rule: a call that ran and cost more than a budget had leaves that budget spent to its cap
    (the reservation plus all that was left), so ``spent`` matches what the budget lost."""
    ledger = BudgetLedger(store)
    held = ledger.reserve(None, ["root", "tip"], {"root": 10, "tip": 12}, 5)
    ledger.commit(held, 20, exhaust=True)
    assert [ledger.spent(g) for g in ("root", "tip")] == [10, 12]
    assert [ledger.usage(g) for g in ("root", "tip")] == [(10, 0), (12, 0)]


@pytest.mark.parametrize("second", ["commit", "release"])
def test_a_reservation_settled_by_another_process_is_never_settled_again(store: Store, second: str) -> None:
    """Mutant: the settling UPDATE of a reservation this ledger made dropped ``state = 'reserved'``
    (or trusted its memory of the reservation without the row count).

    Rule: a reservation is settled exactly once across processes. Another process (a second
    ``BudgetLedger`` on the same store) committed it; settling it again here must raise and
    refund nothing, or the budget is spent twice over."""
    mine, theirs = BudgetLedger(store), BudgetLedger(store)
    held = mine.reserve(None, ["root", "tip"], {"root": 10, "tip": 8}, 6)
    theirs.commit(held, 6)
    with pytest.raises(InputError, match="already settled"):
        if second == "commit":
            mine.commit(held, 0)
        else:
            mine.release(held)
    assert [mine.remaining(g) for g in ("root", "tip")] == [4, 2]
    assert [mine.spent(g) for g in ("root", "tip")] == [6, 6]
    with pytest.raises(BudgetExceeded):
        mine.reserve(None, ["root", "tip"], {"root": 10, "tip": 8}, 3)


def test_a_release_returns_the_amount_to_every_link(store: Store) -> None:
    """Mutant: ``release`` skipped the root of the chain.

    Rule: a released reservation gives its whole amount back to every grant it was taken from,
    root included."""
    ledger = BudgetLedger(store)
    caps = {"root": 10, "mid": 9, "tip": 8}
    held = ledger.reserve(None, ["root", "mid", "tip"], caps, 7)
    ledger.release(held)
    assert [ledger.remaining(g) for g in caps] == [10, 9, 8]
    assert [ledger.usage(g) for g in caps] == [(0, 0)] * 3


def test_a_chain_naming_a_grant_twice_is_refused_and_reserves_nothing(store: Store) -> None:
    """Mutant: ``reserve`` dropped the check that a chain's grant ids are distinct.

    Rule: a chain is a list of distinct grants, root first; one naming a grant twice is bad input
    (``InputError``), and no budget is touched (it would be charged twice per call)."""
    ledger = BudgetLedger(store)
    ledger.reserve(None, ["root"], {"root": 10}, 1)
    with pytest.raises(InputError, match="distinct"):
        ledger.reserve(None, ["root", "tip", "root"], {"root": 10, "tip": 10}, 3)
    assert ledger.remaining("root") == 9
    assert ledger.remaining("tip") is None


def test_amounts_beyond_any_budget_are_refused_and_reported_whole(store: Store) -> None:
    """Mutants: ``reserve`` dropped its check of the 64-bit bound; ``commit`` with ``exhaust``
    dropped the part of an actual amount beyond that bound from the shortfall it returns.

    Rule: an amount no budget column can hold is a typed ``BudgetExceeded`` (not a driver
    error) that reserves nothing; a call that ran and cost more is charged all its budget had,
    and the whole rest of its cost is returned as the shortfall to record, none of it lost."""
    ledger = BudgetLedger(store)
    with pytest.raises(BudgetExceeded, match="more than any budget"):
        ledger.reserve(None, ["g"], {"g": 10}, MAX_AMOUNT + 1)
    assert ledger.remaining("g") is None
    held = ledger.reserve(None, ["g"], {"g": 10}, 5)
    cost = MAX_AMOUNT + 100
    assert ledger.commit(held, cost, exhaust=True) == cost - 10
    assert ledger.remaining("g") == 0 and ledger.spent("g") == 10


# --- grants, revocations, nonces -------------------------------------------------------------


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
