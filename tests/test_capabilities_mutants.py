"""Approvals in the store (agentgate/store/approvals.py), on SQLite: each test kills a hand-made
mutant that the suite let live (its docstring names the mutant)."""

from __future__ import annotations

import pytest

from agentgate.authority import (
    GrantRepository,
)
from agentgate.errors import Denied, Expired, Revoked
from agentgate.store import SQLiteStore
from agentgate.store.approvals import ApprovalStore

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
