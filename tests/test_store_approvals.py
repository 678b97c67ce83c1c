"""The approvals store (agentgate/store/approvals.py): an approval is bound to one call, used once,
expires at its ``expires_at`` (no vote nor use at that instant), and is never approved nor denied
by its requester; a quorum needs that many distinct approvers, counted against the rule in force,
also when two approvers vote at once on PostgreSQL; re-arming reopens only a consumed request for
its own call; a request is void once a grant of its chain is revoked, and found only for its
requester; a closed request's approval is refused saying why; prune forgets expired requests."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from test_gate_approvals import Approvals, _request_id
from test_gate_approvals import approvals as approvals  # the fixture

from agentgate.cli.main import main
from agentgate.errors import Denied, Expired, InputError, Revoked, StoreError
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.grants import GrantRepository

AGENT = "did:key:zAgent"
ALICE = "did:key:zAlice"
BOB = "did:key:zBob"

# Approvals on both stores: bound to one call, single-use, expiring, not self-approved.


def test_approval_is_consumed_once_for_its_call(store: Store) -> None:
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", "did:key:zAgent", time.time() + 60)
    approvals.approve(request, "did:key:zHuman")
    assert approvals.consume(request, "call-1") == ("did:key:zHuman",)
    with pytest.raises(Denied, match="already used"):
        approvals.consume(request, "call-1")


def test_approval_for_another_call_is_refused(store: Store) -> None:
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", "did:key:zAgent", time.time() + 60)
    approvals.approve(request, "did:key:zHuman")
    with pytest.raises(Denied, match="another call"):
        approvals.consume(request, "call-1-edited")
    assert approvals.get(request).state == "approved"


def test_late_approval_does_not_flip_an_expired_request(store: Store) -> None:
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", "did:key:zAgent", time.time() + 60)
    with pytest.raises(Expired):
        approvals.approve(request, "did:key:zHuman", now=time.time() + 61)
    assert approvals.get(request).state == "pending"
    approvals.approve(request, "did:key:zHuman")
    with pytest.raises(Expired):
        approvals.consume(request, "call-1", now=time.time() + 61)


def test_requester_cannot_approve_itself(store: Store) -> None:
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", "did:key:zAgent", time.time() + 60)
    with pytest.raises(Denied, match="requester"):
        approvals.approve(request, "did:key:zAgent")


def test_denied_request_cannot_be_consumed(store: Store) -> None:
    approvals = ApprovalStore(store)
    request = approvals.request("call-1", "did:key:zAgent", time.time() + 60)
    approvals.deny(request, "did:key:zHuman")
    with pytest.raises(Denied, match="denied"):
        approvals.consume(request, "call-1")
    with pytest.raises(Denied):
        approvals.approve(request, "did:key:zHuman")
    with pytest.raises(InputError):
        approvals.get("nope")


def test_a_quorum_needs_that_many_distinct_approvers(store: Store) -> None:
    approvals = ApprovalStore(store)
    request = approvals.request("call-q", "did:key:zAgent", time.time() + 60, quorum=2)
    approvals.approve(request, "did:key:zAlice")
    with pytest.raises(Denied, match="is pending"):
        approvals.consume(request, "call-q")  # one yes of two is not an approval
    with pytest.raises(Denied, match="counts once"):
        approvals.approve(request, "did:key:zAlice")
    with pytest.raises(Denied, match="requester"):
        approvals.approve(request, "did:key:zAgent")
    approvals.approve(request, "did:key:zBob")
    assert approvals.get(request).state == "approved"
    assert approvals.consume(request, "call-q") == ("did:key:zAlice", "did:key:zBob")
    with pytest.raises(Denied, match="already used"):
        approvals.consume(request, "call-q")


def test_a_quorum_below_one_is_refused(store: Store) -> None:
    with pytest.raises(InputError):
        ApprovalStore(store).request("call", "did:key:zAgent", time.time() + 60, quorum=0)


def _wait_until_blocked(store: Store, what: str) -> None:
    """Until a backend of this database waits on a lock (``what``: for the failure message)."""
    for _ in range(2000):
        rows = store.query(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        if rows[0][0]:
            return
        time.sleep(0.005)
    raise AssertionError(f"{what} never waited on the lock")


@pytest.mark.postgres
@pytest.mark.parametrize("quorum", [1, 2])
def test_two_approvers_voting_at_once_on_postgresql_approve_the_request(
    postgres_url: str, quorum: int
) -> None:
    from agentgate.store._postgres import PostgresStore

    rule = QuorumRule(quorum, frozenset({"did:alice", "did:bob"}))
    with PostgresStore(postgres_url) as one, PostgresStore(postgres_url) as two:
        first, second = ApprovalStore(one), ApprovalStore(two)
        asked = first.request("call-1", "did:agent", time.time() + 600, quorum=1)
        errors: list[BaseException] = []

        def vote() -> None:
            try:
                second.approve(asked, "did:bob", call_hash="call-1", rule=rule)
            except BaseException as exc:  # pragma: no cover - shown by the assertion below
                errors.append(exc)

        with one.transaction() as tx:
            first.approve(asked, "did:alice", call_hash="call-1", tx=tx, rule=rule)
            voter = threading.Thread(target=vote)
            voter.start()
            _wait_until_blocked(one, "bob's vote")
        voter.join()
        assert errors == []
        record = first.get(asked)
        assert (record.state, record.quorum) == ("approved", quorum)
        assert first.approvers(asked, rule=rule) == ("did:alice", "did:bob")
        assert first.consume(asked, "call-1", rule=rule) == ("did:alice", "did:bob")


def test_prune_forgets_the_call_rows_of_expired_requests(approvals: Approvals) -> None:
    old = _request_id(approvals.ask(7, "m", "v1"))
    _request_id(approvals.ask(8, "m", "v2"))
    assert approvals.gate.store.query("SELECT COUNT(*) FROM approval_calls")[0][0] == 2
    assert approvals.gate.approvals.prune(time.time() + 10_000) == 2
    assert approvals.gate.store.query("SELECT COUNT(*) FROM approval_calls")[0][0] == 0
    assert approvals.gate.store.query("SELECT COUNT(*) FROM approvals WHERE id = ?", (old,))[0][0] == 0


def test_using_a_superseded_requests_approval_says_it_was_superseded(approvals: Approvals) -> None:
    """The lead's follow-up of the observation above: the refusal of an approval of a closed
    request said only "is denied"; it now says the request was superseded."""
    first = approvals.ask(500, "m", "v1")
    approvals.ask(900, "m", "v2")  # the edit closes the first request
    with pytest.raises(Denied, match="superseded, its call was changed"):
        ApprovalStore(approvals.gate.store).approve(_request_id(first), approvals.keys["lead"].did)


# On SQLite: each test kills a hand-made mutant that the suite let live (its docstring names the
# mutant).
NOW = 1_800_000_000


def test_an_approval_given_before_its_grant_was_revoked_cannot_be_used(sqlite_store: SQLiteStore) -> None:
    """Kills P7 (``ApprovalStore.consume`` without the revocation condition): a request approved,
    then its chain's root revoked, must not be consumed (``Revoked``), or the approved call runs
    on a dead grant."""
    grants = GrantRepository(sqlite_store)
    approvals = ApprovalStore(sqlite_store)
    chain = ("a" * 64, "b" * 64)
    asked = approvals.request("call-1", "did:agent", NOW + 600, grants=chain)
    approvals.approve(asked, "did:alice", call_hash="call-1", now=NOW)
    assert approvals.get(asked).state == "approved"
    grants.revoke(chain[0], now=NOW + 1, reason="compromised root")
    with pytest.raises(Revoked):
        approvals.consume(asked, "call-1", now=NOW + 2)
    assert approvals.get(asked).state == "approved"  # not consumed: nothing ran on it


def test_no_vote_is_taken_at_the_instant_a_request_expires(sqlite_store: SQLiteStore) -> None:
    """Kills P4 (the vote's condition ``expires_at >= ?``): at its expiry instant a request is
    expired (``open_for`` and ``consume`` say so too), and a late yes never approves it."""
    approvals = ApprovalStore(sqlite_store)
    asked = approvals.request("call-1", "did:agent", NOW + 600)
    with pytest.raises(Expired):
        approvals.approve(asked, "did:alice", call_hash="call-1", now=NOW + 600)
    assert approvals.get(asked).state == "pending"
    assert approvals.approvers(asked) == ()


def test_the_requester_cannot_deny_its_own_request(sqlite_store: SQLiteStore) -> None:
    """Kills P6 (``deny`` without ``requester <> ?``): as for approving, the approver must differ
    from the requester; an agent closing its own request would hide it from the humans."""
    approvals = ApprovalStore(sqlite_store)
    asked = approvals.request("call-1", "did:agent", NOW + 600)
    with pytest.raises(Denied, match="must not be the requester"):
        approvals.deny(asked, "did:agent", now=NOW)
    assert approvals.get(asked).state == "pending"
    approvals.deny(asked, "did:alice", now=NOW)
    assert approvals.get(asked).state == "denied"


# Each test below names the hand-made mutant it kills (what the mutant did) and the rule it pins,
# and runs on SQLite and on PostgreSQL (the ``store`` fixture).


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


def test_the_requester_cannot_deny_its_own_request_on_every_store(store: Store) -> None:
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


@pytest.mark.parametrize("voters", ["not json", "5", '{"did:key:zAlice": 1}', '["did:key:zAlice", 7]'])
def test_counted_voters_that_are_no_list_of_dids_are_a_store_error_not_a_traceback(
    sqlite_store: SQLiteStore, voters: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R52: ``votes_of`` read a request's ``approval_counted`` row with ``json.loads``
    and ``set()``, so a row that is not a JSON list of DIDs (a store edited by hand, or damaged)
    made ``agentgate approval list`` end with a ``JSONDecodeError`` or ``TypeError`` traceback
    (or count a dict's keys as voters). It is a ``StoreError`` naming the request: exit 2, one
    line."""
    approvals = ApprovalStore(sqlite_store)
    request = approvals.request("call-1", AGENT, time.time() + 60, quorum=2, voters=[ALICE, BOB])
    with sqlite_store.transaction() as tx:
        tx.execute("UPDATE approval_counted SET voters = ? WHERE approval_id = ?", (voters, request))
    with pytest.raises(StoreError, match=f"approval request {request}.*not a JSON list of DIDs"):
        approvals.votes(request)
    assert main(["approval", "list", "--store", sqlite_store.url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and request in err


def test_a_revocation_closes_only_the_open_requests_standing_on_its_grants(store: Store) -> None:
    """Review R55: ``void_standing_on`` (what every revoker calls in its transaction) closes, as
    denied by ``agentgate:revoked``, the open requests whose chain holds a revoked grant (an
    ancestor's too: the chain is kept root to tip), naming the first revoked grant by id and the
    request's ``approval_required`` index; a request on other grants, one decided, used or
    expired is left as it is, and a request closed so is still found by ``void_for``."""
    approvals = ApprovalStore(store)
    grants = GrantRepository(store)
    later = time.time() + 60
    own = approvals.request("call-1", AGENT, later, grants=["a" * 64, "b" * 64])
    approvals.asked(own, 7)
    below = approvals.request("call-2", AGENT, later, grants=["a" * 64, "b" * 64, "c" * 64])
    approved = approvals.request("call-3", AGENT, later, grants=["b" * 64])
    approvals.approve(approved, ALICE)
    other = approvals.request("call-4", AGENT, later, grants=["d" * 64])
    used = approvals.request("call-5", AGENT, later, grants=["b" * 64])
    approvals.approve(used, ALICE)
    approvals.consume(used, "call-5")
    lapsed = approvals.request("call-6", AGENT, time.time() + 1, grants=["b" * 64])

    with store.transaction() as tx, grants.within(tx):
        grants.revoke("b" * 64, now=int(time.time()))
        grants.revoke("a" * 64, now=int(time.time()))
        closed = approvals.void_standing_on(["b" * 64, "a" * 64], now=time.time() + 2, tx=tx)

    assert closed == [(own, "a" * 64, 7), (below, "a" * 64, None), (approved, "b" * 64, None)]
    for request in (own, below, approved):
        record = approvals.get(request)
        assert (record.state, record.approver) == ("denied", "agentgate:revoked")
    assert [approvals.get(r).state for r in (other, used, lapsed)] == ["pending", "consumed", "pending"]
    assert approvals.void_for("call-1", AGENT) == (own, 7)
    assert approvals.void_standing_on(["a" * 64, "b" * 64], now=time.time() + 2) == []
