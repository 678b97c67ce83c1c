"""Review R90: ``next_deadline`` names the time a waiting request's preemption candidate drops out.

A lease stops being a preemption candidate for a waiting request once its grace would no longer end
before the request's wait does; the request is then tried again (``_Queue.woken``), and may now
preempt another lease. ``advance`` at that time did so by itself, but ``next_deadline`` named only
the request's timeout: a driver sleeping until ``next_deadline`` (benchmarks/broker.py, the docs'
event loop) reached the timeout first, and the request timed out where it would have preempted and
been granted. ``next_deadline`` now names the earliest such wake, kept in the queue's heap.
"""

from __future__ import annotations

from test_broker import FakeClock
from test_broker_r89c_preemption_retry_ulp import _scene

from agentgate.dispatch.broker import BrokerEvent, CheckpointNotice, Granted, LeaseEnded, TimedOut
from agentgate.dispatch.broker._preemption import first_time_reaching


def _named(events: list[BrokerEvent]) -> list[tuple[str, str]]:
    return [
        (
            type(e).__name__,
            e.lease.id if isinstance(e, CheckpointNotice | Granted | LeaseEnded) else e.request.id,
        )
        for e in events
    ]


def test_next_deadline_names_the_time_the_candidate_drops_out() -> None:
    clock = FakeClock()
    broker = _scene(clock)  # at 101: a100 (grace 200) still a candidate for w (deadline 302)
    dropped = first_time_reaching(302.0, 200)
    assert broker.next_deadline() == dropped  # until the review: 302.0, w's timeout
    clock.now = dropped
    assert _named(broker.advance()) == [("CheckpointNotice", "h100")]


def test_a_driver_sleeping_until_next_deadline_preempts_and_is_granted_instead_of_timing_out() -> None:
    clock = FakeClock()
    broker = _scene(clock)
    seen: list[tuple[str, str]] = []
    while (deadline := broker.next_deadline()) is not None and deadline < 302.0:
        clock.now = deadline
        seen += _named(broker.advance())
    assert seen == [("CheckpointNotice", "h100"), ("LeaseEnded", "h100"), ("Granted", "w")]
    clock.now = 302.0
    assert not any(isinstance(e, TimedOut) for e in broker.advance())
