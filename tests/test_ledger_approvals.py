"""Approvals on both stores: bound to one call, single-use, expiring, not self-approved."""

from __future__ import annotations

import time

import pytest

from agentgate.errors import Denied, Expired, InputError
from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore


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
