"""The approvals store (agentgate/store/approvals.py): a request's votes are counted against the
rule in force, also when two approvers vote at once on PostgreSQL, a closed request's approval
is refused saying why, and prune forgets expired requests with their rows."""

from __future__ import annotations

import threading
import time

import pytest
from test_gate_approvals import Approvals, _request_id
from test_gate_approvals import approvals as approvals  # the fixture

from agentgate.errors import Denied
from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore, QuorumRule


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
