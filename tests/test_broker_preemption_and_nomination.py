"""The GPU broker: what docs/broker.md promises, checked by running it.

Each test failed on the code before its fix.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from test_broker_gated import Setup as GatedSetup

from agentgate.dispatch.broker import (
    Broker,
    BrokerSnapshot,
    CheckpointNotice,
    GangRequest,
    Granted,
    LeaseEnded,
    TenantQuota,
    TimedOut,
    synthetic_topology,
)
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _broker(clock: Clock, journal: BrokerLeaseStore | None = None) -> Broker:
    quotas = [TenantQuota("a", nominal=8)]
    return Broker(synthetic_topology(1, 8), quotas, clock=clock, ttl_s=600.0, grace_s=120.0, journal=journal)


def _nominated(clock: Clock, broker: Broker) -> None:
    """``high`` (wait at most 500 s) preempts ``low`` at t=10; ``low``'s grace ends at 130."""
    broker.submit(GangRequest("low", "a", 8))
    clock.now = 10.0
    events = broker.submit(GangRequest("high", "a", 8, priority=1, timeout_s=500.0))
    assert [type(e) for e in events] == [CheckpointNotice]


def _cohort(clock: Clock) -> Broker:
    quotas = [TenantQuota("a", 4, cohort="lab"), TenantQuota("b", 4, cohort="lab")]
    return Broker(synthetic_topology(1, 8), quotas, clock=clock, ttl_s=600.0, grace_s=120.0)


def test_a_request_that_cannot_wait_for_a_victims_grace_preempts_nobody() -> None:
    # high may wait 50 s; low's checkpoint grace is 120 s. high used to notify low anyway and,
    # its deadline then inf, be granted at 130, 70 s past its wait. Now it waits without a
    # victim and times out at 60, and low was never told to checkpoint.
    clock = Clock()
    broker = _broker(clock)
    broker.submit(GangRequest("low", "a", 8))
    clock.now = 10.0
    assert broker.submit(GangRequest("high", "a", 8, priority=1, timeout_s=50.0)) == []
    (queued,) = broker.queue()
    assert (queued.deadline, queued.nominated) == (60.0, ())
    clock.now = 60.0
    assert [type(e) for e in broker.advance()] == [TimedOut]
    assert [(lease.id, lease.state) for lease in broker.leases()] == [("low", "active")]


def test_a_nominated_request_whose_wait_is_over_is_not_granted_when_the_broker_wakes_late() -> None:
    # The clock passed both the victim's grace end (130) and the request's deadline (510) between
    # two calls: the request is over, not granted at 600 (a lease granted past its wait).
    clock = Clock()
    broker = _broker(clock)
    _nominated(clock, broker)
    assert broker.queue()[0].deadline == 510.0  # kept while nominated; it used to become inf
    clock.now = 600.0
    events = broker.advance()
    assert [type(e) for e in events] == [TimedOut, LeaseEnded]
    assert broker.leases() == [] and broker.free_gpus() == 8 and broker.usage("a") == 0


def test_a_nominated_request_held_back_past_its_deadline_times_out_and_gives_its_gpus_back() -> None:
    # p's victim a1 ends at 121, but h's victim a2 (grace 300 s) holds its GPUs until 302 and the
    # cohort has no room for p beside them. p's wait ends at 151: it times out then, its reserved
    # GPUs free again, rather than wait on for ever (a nominated request never timed out).
    clock = Clock()
    broker = _cohort(clock)
    for lease_id, tenant, grace in (
        ("a1", "a", 120.0),
        ("a2", "a", 300.0),
        ("a3", "a", 120.0),
        ("b1", "b", 120.0),
    ):
        broker.submit(GangRequest(lease_id, tenant, 2, grace_s=grace))
    clock.now = 1.0
    assert [e.lease.id for e in broker.submit(GangRequest("p", "b", 2, timeout_s=150.0))] == ["a1"]
    clock.now = 2.0
    assert [e.lease.id for e in broker.submit(GangRequest("h", "a", 2, priority=1, timeout_s=400.0))] == [
        "a2"
    ]
    clock.now = 121.0
    assert [type(e) for e in broker.advance()] == [LeaseEnded]  # a1; p waits for a2's GPUs
    assert broker.next_deadline() == 151.0
    clock.now = 151.0
    events = broker.advance()
    assert [(type(e), e.request.id) for e in events if isinstance(e, TimedOut)] == [(TimedOut, "p")]
    assert "p" not in {q.request.id for q in broker.queue()} and broker.usage("b") == 2
    assert broker.free_gpus() == 2  # a1's GPUs, reserved for p until now


def test_a_restored_nominated_request_keeps_its_deadline(tmp_path: Path) -> None:
    clock = Clock()
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        _nominated(clock, _broker(clock, BrokerLeaseStore(store)))
        saved = BrokerLeaseStore(store).load()
        assert saved is not None
        (queued,) = saved.queue
        assert queued.deadline == 510.0
    # A journal written before the fix saved inf: the request's own timeout_s still holds.
    old = BrokerSnapshot(saved.taken_at, saved.leases, (dataclasses.replace(queued, deadline=float("inf")),))
    for snapshot in (saved, old):
        clock.now = 10.0
        restarted = _broker(clock)
        restarted.restore(snapshot)
        assert restarted.next_deadline() == 10.0  # the queue taken over is untried (review R90)
        assert restarted.advance() == []
        assert restarted.next_deadline() == 130.0
        clock.now = 600.0
        assert [type(e) for e in restarted.advance()] == [TimedOut, LeaseEnded]
        assert restarted.queue() == [] and restarted.usage("a") == 0


def test_a_gated_request_never_preempts_a_lease_it_could_not_wait_for(tmp_path: Path) -> None:
    # The grant lives 3600 s; a lease of 3570 s may wait 30 s at most (docs/broker.md). It used
    # to preempt a lease with a 120 s grace anyway and, its wait then unbounded, be granted when
    # that grace ended: a lease ~90 s past the grant that decided it.
    setup = GatedSetup(tmp_path)
    try:
        trainer, other = setup.ids["trainer"], setup.ids["other"]
        for who, lease_id in ((trainer, "low-1"), (trainer, "low-2"), (other, "o1")):  # the cluster, full
            assert setup.gated.submit(
                who, GangRequest(lease_id, "x", 8, gpu_type="H100", ttl_s=600.0)
            ).lease()
        answer = setup.gated.submit(
            trainer, GangRequest("high", "x", 8, priority=1, gpu_type="H100", ttl_s=3570.0)
        )
        assert answer.allowed and answer.events == ()
        setup.clock.now += 200.0  # past its wait and any victim's grace
        events = setup.gated.advance()
        assert [type(e) for e in events] == [TimedOut]
        assert {lease.id: lease.state for lease in setup.broker.leases()} == {
            "low-1": "active",
            "low-2": "active",
            "o1": "active",
        }
        statuses = [e.status for e in setup.entries() if e.kind == "outcome"]
        assert statuses.count("lease_timed_out") == 1 and "lease_preempt_notice" not in statuses
    finally:
        setup.gate.close()


def test_a_nominated_request_held_back_by_its_quota_is_granted_once_the_quota_holds_it() -> None:
    # p's victim a1 has ended, but a2 (notified too) still holds its GPUs for its 120 s grace, and
    # the cohort has no room for p beside them. Then b1 ends: now the cohort holds p. It used to
    # stay nominated, its GPUs reserved and idle, until a2's grace ended (only the end of a
    # notified lease looked at it again), and a restored broker granted it at once.
    clock = Clock()
    broker = _cohort(clock)
    for lease_id, tenant in (("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")):
        broker.submit(GangRequest(lease_id, tenant, 2))
    clock.now = 1.0
    assert [e.lease.id for e in broker.submit(GangRequest("p", "b", 2))] == ["a1"]  # reclaimed
    clock.now = 2.0
    assert [e.lease.id for e in broker.submit(GangRequest("h", "a", 2, priority=1))] == ["a2"]
    clock.now = 3.0
    assert [type(e) for e in broker.release("a1")] == [LeaseEnded]  # p's quota holds it back
    clock.now = 4.0
    events = broker.release("b1")
    assert [(type(e), e.lease.id) for e in events if isinstance(e, Granted | LeaseEnded)] == [
        (LeaseEnded, "b1"),
        (Granted, "p"),
    ]


def test_a_restored_broker_grants_no_nominated_request_past_its_quota() -> None:
    # research may hold 12. rC's victim rA ended, but rB (reclaimed by p1) holds its 8 GPUs for
    # its 300 s grace: rC waits for it. A broker restored from that state used to grant rC at
    # once, without the quota check, and research held 16 GPUs for the rest of rB's grace.
    clock = Clock()
    quotas = [
        TenantQuota("research", nominal=8, cohort="lab", borrowing_limit=4),
        TenantQuota("prod", nominal=8, cohort="lab"),
    ]

    def broker() -> Broker:
        return Broker(synthetic_topology(4, 8), quotas, clock=clock, ttl_s=600.0, grace_s=120.0)

    live = broker()
    live.submit(GangRequest("rB", "research", 8, priority=0, grace_s=300))
    live.submit(GangRequest("rA", "research", 4, priority=1, grace_s=10))
    live.submit(GangRequest("p1", "prod", 8))  # reclaims rB
    clock.now = 1.0
    live.submit(GangRequest("rC", "research", 8, priority=2))  # preempts rA
    clock.now = 20.0
    live.advance()  # rA's grace is over
    waiting = {q.request.id: q for q in live.queue()}
    assert set(waiting) == {"rC", "p1"} and waiting["rC"].victims == ()
    restarted = broker()
    restarted.restore(live.snapshot())
    restarted.advance()
    for state in (live, restarted):
        held = sum(len(lease.gpus) for lease in state.leases() if lease.tenant == "research")
        assert held <= 12 and "rC" in {q.request.id for q in state.queue()}
