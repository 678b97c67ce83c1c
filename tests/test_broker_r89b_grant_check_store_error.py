"""Regression review of R89: a ``grant_check`` that raised ``StoreError`` (a transient "database is
locked" of the store a ``GatedBroker`` reads) left the request that fits the free GPUs waiting,
as documented, but ``next_deadline`` then named the next timer (a locality wait, here 1,800 s
later), not now: a driver sleeping until ``next_deadline`` (docs/broker.md) left the GPUs idle
that long, though the docs say the request is "asked again at the next try". ``next_deadline``
said now until a call had tried the queue again; since a third regression review of R89 it names
``GRANT_CHECK_RETRY_S`` (1 s) after the call that could not read the store, so that a driver
sleeping until it does not read the store in a loop while it stays down."""

from __future__ import annotations

from agentgate.dispatch.broker import Broker, GangRequest, Granted, TenantQuota, synthetic_topology
from agentgate.dispatch.broker._broker import GRANT_CHECK_RETRY_S
from agentgate.errors import StoreError


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _FailingOnce:
    """A ``grant_check`` whose first answer is a ``StoreError``; it lets every request after."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, request: GangRequest) -> str | None:
        self.asked += 1
        if self.asked == 1:
            raise StoreError("database is locked")
        return None


def test_a_grant_check_store_error_leaves_next_deadline_a_retry_away() -> None:
    clock = _Clock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock)
    check = broker.grant_check = _FailingOnce()
    assert broker.submit(GangRequest(id="r1", tenant="a", gpus=8)) == []
    assert check.asked == 1
    assert [q.request.id for q in broker.queue()] == ["r1"]  # left waiting, as it was
    assert broker.free_gpus() == 8
    # Until the review: 2800.0, the locality wait; until the third review, now.
    assert broker.next_deadline() == clock.now + GRANT_CHECK_RETRY_S
    # A driver woken at next_deadline: the request asked again and granted.
    clock.now = broker.next_deadline()
    granted = [e.lease.id for e in broker.advance() if isinstance(e, Granted)]
    assert granted == ["r1"] and check.asked == 2
    assert broker.next_deadline() == clock.now + 60.0  # tried: the lease's expiry is next


def test_a_store_error_asked_again_at_each_call_keeps_naming_a_retry_after_it() -> None:
    clock = _Clock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock)

    def locked(request: GangRequest) -> str | None:
        raise StoreError("database is locked")

    broker.grant_check = locked
    broker.submit(GangRequest(id="r1", tenant="a", gpus=8))
    for _ in range(2):
        clock.now += 0.25
        assert broker.advance() == []
        assert broker.next_deadline() == clock.now + GRANT_CHECK_RETRY_S
    assert [q.request.id for q in broker.queue()] == ["r1"] and broker.leases() == []
