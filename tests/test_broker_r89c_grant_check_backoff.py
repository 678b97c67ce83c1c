"""Regression review of R89 (third): while ``grant_check``'s store stays down, a driver sleeping until
``next_deadline`` asks it again once a second of the broker's clock, not in a loop.

After a ``StoreError`` of ``grant_check`` (R89b) ``next_deadline`` said the clock's now after every
call, so a driver that sleeps until ``next_deadline`` and then calls ``advance`` (docs/broker.md)
never slept: it read the store in a loop, once per request about to take GPUs, for as long as the
store was down. ``next_deadline`` now names ``GRANT_CHECK_RETRY_S`` (1 s) after the call that could
not read the store, unless something else comes sooner; any call still asks the store again.
"""

from __future__ import annotations

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    TenantQuota,
    TimedOut,
    synthetic_topology,
)
from agentgate.dispatch.broker._broker import GRANT_CHECK_RETRY_S
from agentgate.errors import StoreError


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Store:
    """A ``grant_check`` over a store that is down until ``up`` says otherwise."""

    def __init__(self) -> None:
        self.up, self.reads = False, 0

    def __call__(self, request: GangRequest) -> str | None:
        self.reads += 1
        if not self.up:
            raise StoreError("database is locked")
        return None


def test_a_driver_sleeping_until_next_deadline_reads_a_down_store_once_a_second() -> None:
    clock = _Clock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock)
    store = broker.grant_check = _Store()
    assert broker.submit(GangRequest(id="r1", tenant="a", gpus=8)) == []
    assert GRANT_CHECK_RETRY_S == 1.0  # as docs/broker.md says
    # The driver: sleep until next_deadline, then advance; 100 wakes at most.
    for _ in range(100):
        deadline = broker.next_deadline()
        assert deadline is not None and deadline > clock.now  # until the review: now, every time
        clock.now = deadline
        if clock.now >= 1010.0:
            break
        assert broker.advance() == []
    assert clock.now == 1010.0 and store.reads == 10  # the submit's read, then one a second
    store.up = True  # back at 1010: the driver's wake then grants the request
    granted = [e.lease.id for e in broker.advance() if isinstance(e, Granted)]
    assert granted == ["r1"] and store.reads == 11


def test_a_timeout_sooner_than_the_retry_is_named_first() -> None:
    clock = _Clock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock)
    broker.grant_check = _Store()
    broker.submit(GangRequest(id="r1", tenant="a", gpus=8), wait_s=0.5)
    assert broker.next_deadline() == 1000.5
    clock.now = 1000.5
    assert [type(e).__name__ for e in broker.advance()] == [TimedOut.__name__]
    assert broker.next_deadline() is None  # nothing waits for the store any more


def test_a_call_within_the_second_still_asks_the_store() -> None:
    clock = _Clock()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock)
    store = broker.grant_check = _Store()
    broker.submit(GangRequest(id="r1", tenant="a", gpus=8))
    store.up = True
    clock.now += 0.1
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["r1"]
    assert store.reads == 2
