"""Review R90: ``next_deadline`` reads the first deadline and the first wake off the queue's heaps,
not every waiting request.

R89 made a submit that places nothing cost about ``log(queue)``, but ``next_deadline`` still read
every lease and waiting request under the broker's lock (3.4 ms with 8,000 waiting): a driver that
calls it after each call, as benchmarks/broker.py and the docs' event loop do, took time in n
squared to queue n requests (12 s for 8,000, against 0.2 s for the submits alone). The tests below
count the waiting requests it reads, and check what it names: the first deadline once earlier
requests left, now after a setting changed (the wakes in the heap were worked out with the old
one); after a pass over the queue that raised it names ``GRANT_CHECK_RETRY_S`` later (a regression
review of R90: it said now, for ever while each pass raised).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_broker import FakeClock

import agentgate.dispatch.broker._broker as broker_module
from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    TenantQuota,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.dispatch.broker._broker import GRANT_CHECK_RETRY_S
from agentgate.dispatch.broker._waiting import _Waiting

_reads = [0]


class _Counted(_Waiting):
    """A waiting request that counts the reads of its fields."""

    def __getattribute__(self, name: str) -> Any:
        _reads[0] += 1
        return super().__getattribute__(name)


def _full(clock: FakeClock, waiting: int) -> Broker:
    """One node of 8 GPUs held by ``hold``, and ``waiting`` gangs of 8 behind it, the first to be
    queued waiting longest (no locality wait: their deadlines are the times named)."""
    topology = synthetic_topology(nodes=1, gpus_per_node=8)
    broker = Broker(topology, [TenantQuota("a", 16)], clock=clock, ttl_s=10**6, locality_wait_s=float("inf"))
    broker.submit(GangRequest("hold", "a", 8, priority=5))
    for i in range(waiting):
        broker.submit(GangRequest(f"w{i}", "a", 8, priority=i % 3), wait_s=2000.0 - i)
    return broker


def _reads_per_call(waiting: int, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(broker_module, "_Waiting", _Counted)
    broker = _full(FakeClock(), waiting)
    _reads[0] = 0
    for _ in range(10):
        assert broker.next_deadline() == 2000.0 - (waiting - 1)
    return _reads[0] // 10


def test_next_deadline_reads_as_many_waiting_requests_whatever_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short, long = _reads_per_call(100, monkeypatch), _reads_per_call(400, monkeypatch)
    assert short == long <= 10  # until the review: every waiting request, three fields or more


def test_the_first_deadline_left_names_the_next() -> None:
    clock = FakeClock()
    broker = _full(clock, 3)  # w0 waits until 2000, w1 until 1999, w2 until 1998
    assert broker.next_deadline() == 1998.0
    broker.release("w2")
    assert broker.next_deadline() == 1999.0
    broker.release("w1")
    assert broker.next_deadline() == 2000.0
    broker.release("w0")
    assert broker.next_deadline() == 10**6  # hold's expiry


def _halves(clock: FakeClock) -> Broker:
    """Node 0 (H100) and node 1 (A100) each with 4 GPUs free: a communication-bound gang of 8
    waits for one NVLink domain until its locality wait ends, then spreads over both."""
    topology = synthetic_topology(nodes=2, gpus_per_node=8, types=(("H100", 80.0), ("A100", 40.0)))
    broker = Broker(topology, [TenantQuota("a", 16)], clock=clock, ttl_s=10**6, locality_wait_s=1800.0)
    broker.submit(GangRequest("half0", "a", 4, gpu_type="H100"))
    broker.submit(GangRequest("half1", "a", 4, gpu_type="A100"))
    broker.submit(GangRequest("comm", "a", 8, hint=WorkloadHint(bound="communication")))
    return broker


def test_a_setting_changed_since_the_last_call_makes_next_deadline_now() -> None:
    clock = FakeClock()
    broker = _halves(clock)
    assert broker.next_deadline() == 1800.0
    clock.now = 50.0
    broker.locality_wait_s = 100.0
    assert broker.next_deadline() == 50.0  # the wake in the heap was worked out with 1800
    assert broker.advance() == []
    assert broker.next_deadline() == 100.0
    clock.now = 60.0
    broker.locality_wait_s = 10.0  # over already: the gang spreads at the next call
    assert broker.next_deadline() == 60.0
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["comm"]


def test_a_pass_over_the_queue_that_raised_names_the_retry_time() -> None:
    clock = FakeClock()
    topology = synthetic_topology(nodes=1, gpus_per_node=8)
    broker = Broker(topology, [TenantQuota("a", 8)], clock=clock)
    asked: list[str] = []

    def failing_once(request: GangRequest) -> str | None:
        asked.append(request.id)
        if len(asked) == 1:
            raise RuntimeError("a check with a bug")
        return None

    broker.grant_check = failing_once
    with pytest.raises(RuntimeError):
        broker.submit(GangRequest("g", "a", 8, timeout_s=3000.0))
    assert broker.next_deadline() == GRANT_CHECK_RETRY_S  # tried again then: "g" fits
    clock.now = GRANT_CHECK_RETRY_S
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["g"]
