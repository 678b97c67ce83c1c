"""Regression review of R90: a pass over the queue that raises leaves ``next_deadline``
``GRANT_CHECK_RETRY_S`` after the call, not the clock's now for ever.

R90 left the queue untried after a pass that raised (``grant_check`` raising an error other than
``StoreError``, or the placement policy raising), so ``next_deadline`` said now. While every pass
raised, it said now after every call: a driver that logs the error and sleeps until
``next_deadline`` called ``advance``, and the check, in a loop with the broker's lock held (100,000
times in no time of its clock). It now backs off as after a ``StoreError`` of the check: the next
call still tries the whole queue.
"""

from __future__ import annotations

import pytest

from agentgate.dispatch.broker import (
    Broker,
    FreeIndex,
    GangRequest,
    Granted,
    TenantQuota,
    TopologyAware,
    synthetic_topology,
)
from agentgate.dispatch.broker._broker import GRANT_CHECK_RETRY_S


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _held(clock: _Clock, policy: TopologyAware | None = None) -> Broker:
    """Four GPUs held until 50 by ``hold``; ``w`` (2 GPUs) waits for them until 1000."""
    topology = synthetic_topology(nodes=1, gpus_per_node=4)
    broker = Broker(topology, [TenantQuota("a", 4)], clock=clock, policy=policy, locality_wait_s=30.0)
    broker.submit(GangRequest("hold", "a", 4, ttl_s=50.0))
    broker.submit(GangRequest("w", "a", 2, timeout_s=1000.0))
    return broker


def _wakes_within_a_second(broker: Broker, clock: _Clock, error: type[Exception]) -> int:
    """The driver: sleep until ``next_deadline``, advance, log the error; its calls within 1 s."""
    start, calls = clock.now, 0
    while calls < 100 and (deadline := broker.next_deadline()) is not None and deadline <= start + 1:
        clock.now = max(clock.now, deadline)
        calls += 1
        with pytest.raises(error):
            broker.advance()
    return calls


def test_a_grant_check_that_keeps_raising_is_asked_once_a_second() -> None:
    clock = _Clock()
    broker = _held(clock)
    asked: list[str] = []

    def broken(request: GangRequest) -> str | None:
        asked.append(request.id)
        raise RuntimeError("policy engine down")

    broker.grant_check = broken
    clock.now = 60.0  # hold expired: w fits, and its check raises
    assert _wakes_within_a_second(broker, clock, RuntimeError) == 2  # until the review: 100, at 60.0
    assert asked == ["w", "w"] and clock.now == 60.0 + GRANT_CHECK_RETRY_S
    broker.grant_check = None
    clock.now = broker.next_deadline() or 0.0
    assert clock.now == 60.0 + 2 * GRANT_CHECK_RETRY_S
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["w"]


class _Flaky(TopologyAware):
    broken = False

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        if self.broken:
            raise ValueError("bad placement table")
        return super().place(request, free, loosen=loosen)


def test_a_placement_policy_that_raises_is_tried_again_a_second_later() -> None:
    clock = _Clock()
    policy = _Flaky(synthetic_topology(nodes=1, gpus_per_node=4))
    broker = _held(clock, policy)
    policy.broken = True
    clock.now = 60.0
    for _ in range(3):
        with pytest.raises(ValueError):
            broker.advance()
        assert broker.next_deadline() == 60.0 + GRANT_CHECK_RETRY_S  # until the review: 60.0
    policy.broken = False
    clock.now = 60.0 + GRANT_CHECK_RETRY_S
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["w"]


def test_a_timer_sooner_than_the_retry_is_named_first() -> None:
    clock = _Clock()
    broker = _held(clock)

    def broken(request: GangRequest) -> str | None:
        raise RuntimeError("a check with a bug")

    broker.grant_check = broken
    broker.submit(GangRequest("soon", "a", 4, timeout_s=100.0), wait_s=60.5)
    clock.now = 60.0
    with pytest.raises(RuntimeError):
        broker.advance()
    assert broker.next_deadline() == 60.5  # "soon" times out before the retry
