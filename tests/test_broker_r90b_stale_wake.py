"""Regression review of R90: after a pass over the queue that moved something (a grant, a
nomination, a reservation given back) past a request that still waits ahead of it,
``next_deadline`` is now: that request's answer, and its wake, were worked out before the move.

A request tried early in a pass kept the wake worked out against the state before a later request
of the same pass moved something, and ``next_deadline`` named it. Here a draining gang placed in a
domain that came free gives back the GPUs it had reserved, which a waiting request ahead of it
fits at once; ``next_deadline`` named that request's timeout, 970 s later, and a driver sleeping
until then let it time out beside the free GPUs. (With preemption the same stale wake named a time
after a preemption candidate dropped out, when ``advance`` preempted by itself.) The next call
tries the whole queue, so ``next_deadline`` is now until one has.
"""

from __future__ import annotations

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    TenantQuota,
    WorkloadHint,
    synthetic_topology,
)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _granted(events: list[object]) -> list[str]:
    return [e.lease.id for e in events if isinstance(e, Granted)]


def _drained(clock: _Clock) -> Broker:
    """Node 0 (H100): ``h0`` holds 2 GPUs, ``drainer`` (4, communication-bound) reserves the node at
    10 s; node 1 (A100) is held whole by ``h1``. ``h100`` (2 H100s, ranked first) waits from 20 s:
    the H100s left free are the drainer's."""
    topology = synthetic_topology(nodes=2, gpus_per_node=4, types=(("H100", 80.0), ("A100", 40.0)))
    broker = Broker(
        topology,
        [TenantQuota("a", 8), TenantQuota("b", 8)],
        clock=clock,
        ttl_s=10_000.0,
        locality_wait_s=float("inf"),
        drain_after_s=10.0,
        max_draining=1,
    )
    broker.submit(GangRequest("h0", "b", 2, gpu_type="H100"))
    broker.submit(GangRequest("h1", "b", 4, gpu_type="A100"))
    communication = WorkloadHint(bound="communication")
    broker.submit(GangRequest("drainer", "a", 4, hint=communication, timeout_s=1000.0))
    clock.now = 10.0
    assert broker.advance() == [] and broker.queue()[0].draining
    assert broker.next_deadline() == 1000.0  # the drainer, alone, moved: nothing ahead of it is stale
    clock.now = 20.0
    assert broker.submit(GangRequest("h100", "a", 2, gpu_type="H100", priority=5, timeout_s=1000.0)) == []
    return broker


def test_a_request_that_fits_after_a_later_move_is_tried_at_once() -> None:
    clock = _Clock()
    broker = _drained(clock)
    clock.now = 50.0
    assert _granted(broker.release("h1")) == ["drainer"]  # into node 1, its reservation given back
    assert broker.free_gpus() == 2 and [q.request.id for q in broker.queue()] == ["h100"]
    assert broker.next_deadline() == 50.0  # until the review: 1020.0, h100's timeout
    assert _granted(broker.advance()) == ["h100"]


def test_the_pass_that_settles_names_the_next_timer_again() -> None:
    clock = _Clock()
    broker = _drained(clock)
    clock.now = 30.0
    assert broker.submit(GangRequest("late", "a", 8, timeout_s=500.0)) == []  # past a's quota for now
    clock.now = 50.0
    assert _granted(broker.release("h1")) == ["drainer"]  # late, tried after it, keeps a fresh answer
    assert broker.next_deadline() == 50.0  # h100, ahead of the drainer, does not
    assert _granted(broker.advance()) == ["h100"]
    assert broker.next_deadline() == 530.0  # late's timeout: a driver sleeping until it sleeps
    assert broker.advance() == [] and broker.next_deadline() == 530.0
