"""Regression review of R89 (third): with draining on, a request tried no longer counts the draining
requests over the whole queue.

R89 kept the queue in order so that queuing n requests that cannot be placed costs about n log n,
but with ``max_draining`` above 0 each request whose drain delay was over counted the draining
requests by reading every waiting one (``_try_drain``): each submit was linear in the queue, and
queuing n of them quadratic (0.1 ms a submit with 1,000 waiting, 0.3 ms with 4,000). The queue
now keeps the count as requests come, go and start or stop draining (``_Queue.draining``); the
tests below check that a submit reads no other request, and that the count follows each way a
draining gang stops draining: withdrawn, timed out, granted on its group or elsewhere, restored.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_broker import FakeClock

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    TenantQuota,
    TopologyConstraint,
    synthetic_topology,
)
from agentgate.dispatch.broker._waiting import _Queue

WAITING = 200


def _gang(id: str, timeout_s: float = 3600.0) -> GangRequest:
    """A gang of 8 that prefers one node: it may drain one."""
    return GangRequest(id, "a", 8, topology=TopologyConstraint("node", False), timeout_s=timeout_s)


def _broker(clock: FakeClock, nodes: int = 1) -> Broker:
    """Each node held whole by a lease of priority 5 (``hold0``...): none preempts it. One gang
    may drain at once, as soon as it waits."""
    topology = synthetic_topology(nodes=nodes, gpus_per_node=8)
    broker = Broker(
        topology, [TenantQuota("a", 10**6)], clock=clock, ttl_s=10**6, max_draining=1, drain_after_s=0.0
    )
    for n in range(nodes):
        broker.submit(GangRequest(f"hold{n}", "a", 8, priority=5))
    return broker


def _draining(broker: Broker) -> list[str]:
    """The ids of the draining requests, as ``queue()`` shows them; the queue's count agrees."""
    found = [q.request.id for q in broker.queue() if q.draining]
    assert broker._waiting.draining == len(found)
    return found


def test_a_submit_with_draining_on_reads_no_other_waiting_request(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    broker = _broker(clock)
    for i in range(WAITING):
        broker.submit(_gang(f"w{i}"))
    assert _draining(broker) == ["w0"]
    scans = []
    every = _Queue.__iter__

    def counted(queue: _Queue) -> Iterator[str]:
        scans.append(len(queue))
        return every(queue)

    monkeypatch.setattr(_Queue, "__iter__", counted)
    clock.now += 1
    assert broker.submit(_gang("late")) == []
    assert scans == []  # until the review: the whole queue, to count the draining requests
    monkeypatch.undo()
    assert _draining(broker) == ["w0"]  # max_draining reached: "late" waits without draining


def test_another_gang_drains_once_the_draining_one_is_withdrawn_or_times_out() -> None:
    clock = FakeClock()
    broker = _broker(clock)
    broker.submit(_gang("w0", timeout_s=10.0))
    broker.submit(_gang("w1"))
    broker.submit(_gang("w2"))
    assert _draining(broker) == ["w0"]
    clock.now = 10.0
    broker.advance()  # w0 times out
    assert _draining(broker) == ["w1"]
    broker.release("w1")
    assert _draining(broker) == ["w2"]


def test_another_gang_drains_once_the_draining_one_is_granted_on_its_group_or_elsewhere() -> None:
    clock = FakeClock()
    broker = _broker(clock, nodes=2)
    for i in range(3):
        broker.submit(_gang(f"w{i}"))
    assert _draining(broker) == ["w0"]
    drained = broker.queue()[0].nominated
    # The other node frees: w0 goes there (``_place_draining``), and w1 drains.
    other = next(lease.id for lease in broker.leases() if lease.gpus != drained)
    assert [e.lease.id for e in broker.release(other) if isinstance(e, Granted)] == ["w0"]
    assert _draining(broker) == ["w1"]
    # The node w1 drains frees: w1 is granted its reservation, and w2 drains.
    held = next(lease.id for lease in broker.leases() if lease.gpus == broker.queue()[0].nominated)
    assert [e.lease.id for e in broker.release(held) if isinstance(e, Granted)] == ["w1"]
    assert _draining(broker) == ["w2"]


def test_a_restored_draining_gang_counts() -> None:
    clock = FakeClock()
    broker = _broker(clock)
    broker.submit(_gang("w0"))
    broker.submit(_gang("w1"))
    restored = _broker_like(broker, clock)
    restored.restore(broker.snapshot())
    assert _draining(restored) == ["w0"]
    restored.submit(_gang("w2"))
    assert _draining(restored) == ["w0"]  # max_draining reached: w2 waits without draining
    restored.release("w0")
    assert _draining(restored) == ["w1"]


def _broker_like(broker: Broker, clock: FakeClock) -> Broker:
    return Broker(
        broker.topology,
        [TenantQuota("a", 10**6)],
        clock=clock,
        ttl_s=10**6,
        max_draining=1,
        drain_after_s=0.0,
    )
