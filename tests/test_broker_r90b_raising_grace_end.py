"""Regression review of R90: ``grant_check`` raising as a victim's grace ends (the grant of its
preemptor made by that end, not by a pass over the queue) leaves ``next_deadline``
``GRANT_CHECK_RETRY_S`` after the call, as a pass that raised does.

The preemptor stayed nominated beside its free reserved GPUs, and ``next_deadline`` named its next
timer (a preemption candidate dropping out, near its timeout): a driver sleeping until then left the
GPUs idle that long after one error of the check (9,990 s of a 10,000 s wait), and held the victim's
``LeaseEnded`` back with them.
"""

from __future__ import annotations

import pytest

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    LeaseEnded,
    TenantQuota,
    synthetic_topology,
)
from agentgate.dispatch.broker._broker import GRANT_CHECK_RETRY_S


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _RaisingOnce:
    """A ``grant_check`` that raises at its ``failing``-th call (counting from 1), then lets all."""

    def __init__(self, failing: int) -> None:
        self.failing, self.calls = failing, 0

    def __call__(self, request: GangRequest) -> str | None:
        self.calls += 1
        if self.calls == self.failing:
            raise RuntimeError("a check with a bug")
        return None


def _preempting(clock: _Clock, grace_s: float) -> Broker:
    """``low`` holds the node's 4 GPUs; ``high`` preempts it, ``grace_s`` to checkpoint."""
    topology = synthetic_topology(nodes=1, gpus_per_node=4)
    broker = Broker(topology, [TenantQuota("a", 4)], clock=clock, grace_s=grace_s, ttl_s=10_000.0)
    broker.submit(GangRequest("low", "a", 4, priority=0))
    return broker


def test_a_check_raising_at_the_grace_end_names_the_retry() -> None:
    clock = _Clock()
    broker = _preempting(clock, grace_s=5.0)
    broker.grant_check = _RaisingOnce(failing=2)  # 1: the nomination; 2: the grant as low ends
    broker.submit(GangRequest("high", "a", 4, priority=5, timeout_s=10_000.0))
    clock.now = 5.0
    with pytest.raises(RuntimeError):
        broker.advance()
    assert broker.free_gpus() == 0 and [q.request.id for q in broker.queue()] == ["high"]
    assert broker.next_deadline() == 5.0 + GRANT_CHECK_RETRY_S  # until the review: 9995.0
    clock.now = 5.0 + GRANT_CHECK_RETRY_S
    events = broker.advance()
    assert [(type(e), e.lease.id) for e in events if isinstance(e, LeaseEnded | Granted)] == [
        (LeaseEnded, "low"),
        (Granted, "high"),
    ]


def test_a_check_raising_as_a_victim_with_no_grace_ends_names_the_retry() -> None:
    clock = _Clock()
    broker = _preempting(clock, grace_s=0.0)
    broker.grant_check = _RaisingOnce(failing=2)  # the victim ends in the submit that nominates
    with pytest.raises(RuntimeError):
        broker.submit(GangRequest("high", "a", 4, priority=5, timeout_s=10_000.0))
    assert broker.leases() == [] and [q.request.id for q in broker.queue()] == ["high"]
    assert broker.next_deadline() == GRANT_CHECK_RETRY_S  # until the review: high's timeout
    clock.now = GRANT_CHECK_RETRY_S
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["high"]
