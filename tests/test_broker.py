"""The GPU broker's rules: gangs, quotas, borrowing, reclaim, preemption, expiry (docs/broker.md)."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence

import pytest

from agentgate.dispatch.broker import (
    MAX_PRIORITY,
    MAX_REQUEST_ID,
    MIN_PRIORITY,
    Broker,
    BrokerEvent,
    BrokerSnapshot,
    CheckpointNotice,
    FreeIndex,
    GangRequest,
    Granted,
    LeaseEnded,
    QueuedRequest,
    TenantQuota,
    TimedOut,
    Topology,
    TopologyAware,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.dispatch.broker import TenantQuota as BrokerQuota
from agentgate.errors import BrokerError, LeaseLost


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_broker(
    clock: FakeClock,
    quotas: Sequence[TenantQuota] | None = None,
    topology: Topology | None = None,
    **kwargs: float,
) -> Broker:
    topology = topology or synthetic_topology(2, 8)
    quotas = quotas or [TenantQuota("a", len(topology)), TenantQuota("b", len(topology))]
    settings = {"ttl_s": 1000.0, "grace_s": 60.0, "locality_wait_s": 100.0, **kwargs}
    return Broker(topology, quotas, clock=clock, **settings)


def granted(events: Sequence[BrokerEvent]) -> dict[str, tuple[str, ...]]:
    return {e.lease.id: e.lease.gpus for e in events if isinstance(e, Granted)}


def only(events: Sequence[BrokerEvent], kind: type) -> list[BrokerEvent]:
    return [e for e in events if isinstance(e, kind)]


# --- all or nothing ------------------------------------------------------------------------------


def test_gang_that_does_not_fit_whole_gets_nothing_and_waits() -> None:
    clock = FakeClock()
    broker = make_broker(clock)
    assert len(granted(broker.submit(GangRequest("big", "a", 10)))["big"]) == 10
    events = broker.submit(GangRequest("gang", "b", 8))
    assert granted(events) == {}
    assert [lease.id for lease in broker.leases()] == ["big"]
    assert broker.free_gpus() == 6  # nothing held or reserved for the waiting gang
    assert [q.request.id for q in broker.queue()] == ["gang"]
    events = broker.release("big")
    assert len(granted(events)["gang"]) == 8


def test_waiting_gang_times_out_holding_nothing() -> None:
    clock = FakeClock()
    broker = make_broker(clock)
    broker.submit(GangRequest("big", "a", 12))
    broker.submit(GangRequest("gang", "b", 8, timeout_s=30))
    clock.now = 29.9
    assert broker.advance() == []
    clock.now = 30.0
    events = broker.advance()
    assert [e.request.id for e in only(events, TimedOut)] == ["gang"]
    assert broker.queue() == []
    assert broker.free_gpus() == 4
    assert granted(broker.release("big")) == {}


def test_no_partial_placement_under_random_load() -> None:
    """Invariant over 3,000 random operations: every lease holds exactly its gang, no GPU is in
    two leases, a waiting request holds no GPU, and GPUs are conserved."""
    rng = random.Random(7)
    clock = FakeClock()
    topology = synthetic_topology(4, 8)
    quotas = [TenantQuota(t, 12, borrowing_limit=8, cohort="c") for t in ("a", "b")] + [TenantQuota("c", 8)]
    broker = make_broker(
        clock,
        quotas,
        topology,
        ttl_s=50.0,
        grace_s=10.0,
        locality_wait_s=20.0,
        drain_after_s=5.0,
        max_draining=2,
    )
    live: set[str] = set()
    for step in range(3000):
        clock.now += rng.random() * 3
        op = rng.random()
        if op < 0.5:
            tenant = rng.choice("abc")
            hint = WorkloadHint(bound=rng.choice(["compute", "memory", "communication"]))
            constraint = rng.choice(
                [None, TopologyConstraint("nvlink_domain"), TopologyConstraint("node", False)]
            )
            request = GangRequest(
                f"r{step}", tenant, rng.randint(1, 8), rng.randint(0, 2), hint, constraint, timeout_s=40
            )
            events = broker.submit(request)
        elif op < 0.8 and live:
            lease_id = rng.choice(sorted(live))
            try:
                events = broker.release(lease_id)
            except LeaseLost:
                events = broker.advance()
        elif op < 0.9 and live:
            with contextlib.suppress(LeaseLost):
                broker.renew(rng.choice(sorted(live)))
            events = broker.advance()
        else:
            events = broker.advance()
        for e in events:
            if isinstance(e, Granted):
                assert len(e.lease.gpus) == e.lease.request.gpus
                live.add(e.lease.id)
            elif isinstance(e, LeaseEnded):
                live.discard(e.lease.id)
        held = [g for lease in broker.leases() for g in lease.gpus]
        assert len(held) == len(set(held))
        assert {lease.id for lease in broker.leases()} == live
        reserved = [g for q in broker.queue() for g in q.nominated]
        assert len(reserved) == len(set(reserved))
        preempting = {g for q in broker.queue() if not q.draining for g in q.nominated}
        assert not preempting & {
            g for lease in broker.leases() if lease.state == "active" for g in lease.gpus
        }
        assert broker.free_gpus() == len(topology) - len(set(held) | set(reserved))
        for q in broker.queue():
            assert q.request.id not in live
            assert q.nominated == () or len(q.nominated) == q.request.gpus


# --- topology and hints --------------------------------------------------------------------------


def test_required_domain_waits_rather_than_spread() -> None:
    clock = FakeClock()
    broker = make_broker(clock)
    broker.submit(GangRequest("x", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    broker.submit(GangRequest("y", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    assert {lease.level for lease in broker.leases()} == {"nvlink_domain"}
    assert broker.free_gpus() == 6  # 3 + 3: enough GPUs, but not in one domain
    request = GangRequest("z", "b", 6, topology=TopologyConstraint("nvlink_domain"))
    assert granted(broker.submit(request)) == {}
    clock.now = 250  # past the locality wait: a required constraint never loosens
    broker.renew("x")
    broker.renew("y")
    assert granted(broker.advance()) == {}
    x_domain = {g.split("/")[0] for g in next(le.gpus for le in broker.leases() if le.id == "x")}
    events = broker.release("x")
    assert {g.split("/")[0] for g in granted(events)["z"]} == x_domain


def test_communication_bound_gang_waits_for_one_domain_then_spreads() -> None:
    clock = FakeClock()
    broker = make_broker(clock, locality_wait_s=100.0)
    broker.submit(GangRequest("x", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    broker.submit(GangRequest("y", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    comm = GangRequest("comm", "b", 6, hint=WorkloadHint(bound="communication"))
    assert granted(broker.submit(comm)) == {}
    clock.now = 99
    assert granted(broker.advance()) == {}
    clock.now = 100
    events = broker.advance()
    assert len(granted(events)["comm"]) == 6
    assert next(le for le in broker.leases() if le.id == "comm").level == "rack"


def test_communication_bound_gang_is_packed_in_one_domain() -> None:
    clock = FakeClock()
    broker = make_broker(clock, topology=synthetic_topology(2, 8, domains_per_node=2))
    broker.submit(GangRequest("one", "a", 1))
    events = broker.submit(GangRequest("comm", "b", 4, hint=WorkloadHint(bound="communication")))
    gpus = granted(events)["comm"]
    assert len({g.split("/")[0] for g in gpus}) == 1
    assert next(le for le in broker.leases() if le.id == "comm").level == "nvlink_domain"


def test_draining_reserves_one_domain_until_the_gang_fits() -> None:
    clock = FakeClock()
    broker = make_broker(clock, locality_wait_s=10_000.0, drain_after_s=60.0, max_draining=1)
    broker.submit(GangRequest("x", "a", 6, topology=TopologyConstraint("nvlink_domain")))
    broker.submit(GangRequest("y", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    broker.submit(GangRequest("comm", "b", 4, hint=WorkloadHint(bound="communication")))
    assert broker.free_gpus() == 5
    clock.now = 60
    assert broker.advance() == []
    (queued,) = broker.queue()
    y_gpus = next(le.gpus for le in broker.leases() if le.id == "y")
    y_domain = {g.split("/")[0] for g in y_gpus}
    # The domain with the most free GPUs (y's, 3 free) is drained: 3 reserved now, 1 of y's later.
    assert queued.draining and {g.split("/")[0] for g in queued.nominated} == y_domain
    assert len(set(queued.nominated) & set(y_gpus)) == 1
    assert broker.free_gpus() == 2
    small = granted(broker.submit(GangRequest("small", "a", 2)))["small"]
    assert not set(small) & set(queued.nominated)
    events = broker.release("y")
    assert granted(events)["comm"] == queued.nominated
    assert next(le for le in broker.leases() if le.id == "comm").level == "nvlink_domain"


def test_a_draining_gang_is_granted_a_group_that_comes_free_elsewhere() -> None:
    # It drains node 0, where "long" is renewed for as long as its holder runs; node 1 then comes
    # free whole. Until review R51 the gang kept waiting on node 0, up to its timeout, with node 1
    # free and its own 3 GPUs on node 0 reserved and idle.
    clock = FakeClock()
    broker = make_broker(
        clock, topology=synthetic_topology(2, 4), ttl_s=100.0, drain_after_s=10.0, max_draining=1
    )
    broker.submit(GangRequest("long", "a", 1))
    broker.submit(GangRequest("three", "a", 3))
    broker.submit(GangRequest("two", "a", 2))
    big = GangRequest("big", "b", 4, topology=TopologyConstraint("nvlink_domain"), timeout_s=3000)
    assert broker.submit(big) == []
    clock.now = 20
    broker.release("three")  # node 0 has 3 free, node 1 has 2: node 0 is drained
    (queued,) = broker.queue()
    assert queued.draining and {g.split("/")[0] for g in queued.nominated} == {"n000"}
    events = broker.release("two")  # node 1 is free whole
    lease = granted(events)["big"]
    assert {g.split("/")[0] for g in lease} == {"n001"}
    assert broker.queue() == [] and broker.usage("b") == 4
    assert broker.free_gpus() == 3  # node 0's reservation went back
    broker.renew("long")
    assert [le.id for le in broker.leases()] == ["long", "big"]


def test_a_draining_gang_with_a_preferred_constraint_spreads_once_its_locality_wait_is_over() -> None:
    clock = FakeClock()
    broker = make_broker(
        clock, topology=synthetic_topology(2, 4), locality_wait_s=100.0, drain_after_s=10.0, max_draining=1
    )
    broker.submit(GangRequest("long", "a", 1))
    broker.submit(GangRequest("three", "a", 3))
    broker.submit(GangRequest("two", "a", 2))
    wide = GangRequest("wide", "b", 4, topology=TopologyConstraint("nvlink_domain", required=False))
    broker.submit(wide)
    clock.now = 20
    broker.release("three")
    assert broker.queue()[0].draining
    assert broker.next_deadline() == 100  # its locality wait: then it may spread
    clock.now = 100
    lease = granted(broker.advance())["wide"]
    assert {g.split("/")[0] for g in lease} == {"n000", "n001"} and broker.usage("b") == 4


class CountingPlacement:
    """``TopologyAware``, counting the placements the broker asks for."""

    name = "counting"

    def __init__(self, topology: Topology) -> None:
        self.inner = TopologyAware(topology)
        self.calls = 0

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        self.calls += 1
        return self.inner.place(request, free, loosen=loosen)


def test_a_gang_no_preemption_could_place_costs_one_trial_a_call_not_one_per_lease() -> None:
    # Every 8-GPU domain holds one lease whose checkpoint grace outlasts the gang's wait (no
    # candidate) and 7 that could be preempted: no set of victims frees a domain. Until review
    # R51 the broker tried each of the 112 candidates in turn, copying the free index for each,
    # at every call while the gang waited: on 1,000 GPUs every call of every tenant took 0.6 s.
    clock = FakeClock()
    topology = synthetic_topology(16, 8)
    policy = CountingPlacement(topology)
    broker = Broker(topology, [TenantQuota("a", 128)], policy=policy, clock=clock, ttl_s=10**6, grace_s=60)
    for i in range(128):
        broker.submit(GangRequest(f"fill{i}", "a", 1))
    first = {lease.gpus[0].split("/")[0]: lease.id for lease in reversed(broker.leases())}
    for lease_id in first.values():
        broker.release(lease_id)
    for i in range(16):  # one to a domain, each in the one free GPU left
        broker.submit(GangRequest(f"keep{i}", "a", 1, grace_s=10**6))
    assert broker.free_gpus() == 0
    big = GangRequest("big", "a", 8, priority=1, topology=TopologyConstraint("nvlink_domain"))
    assert broker.submit(big) == []
    policy.calls = 0
    clock.now += 1
    assert broker.advance() == []
    assert policy.calls <= 2  # one placement now, one with every candidate preempted
    (queued,) = broker.queue()
    assert queued.request.id == "big" and queued.victims == () and queued.nominated == ()


def test_a_preemption_in_a_bad_layout_costs_trials_logarithmic_in_the_candidates() -> None:
    # 64 nodes of 8 GPUs, each GPU a 1-GPU lease, the newest one slot of every node: a gang that
    # needs a whole node frees one only with most of the 512 candidates (newest first) counted.
    # Until review R52 the broker tried each prefix of the candidates in turn, then tried to drop
    # each of the ~450 victims in turn, each trial a placement over a copy of the free index:
    # quadratic in the GPUs (4.4 s on 1,000 GPUs, a minute on 4,000). The victims are the same.
    clock = FakeClock()
    nodes = 64
    topology = synthetic_topology(nodes, 8)
    policy = CountingPlacement(topology)
    broker = Broker(topology, [TenantQuota("a", nodes * 8)], policy=policy, clock=clock, ttl_s=10**9)
    for i in range(nodes * 8):  # GPU slot i % 8 of node i // 8, granted at slot x nodes + node
        clock.now = 1000.0 + (i % 8) * nodes + i // 8
        broker.submit(GangRequest(f"fill{i}", "a", 1))
    clock.now = 2000.0
    policy.calls = 0
    events = broker.submit(GangRequest("big", "a", 8, priority=1, topology=TopologyConstraint("node")))
    notices = [e for e in events if isinstance(e, CheckpointNotice)]
    assert len(notices) == 8 and len({e.lease.gpus[0].split("/")[0] for e in notices}) == 1
    assert policy.calls <= 40  # a few per halving of 512 candidates, a few per victim kept
    (queued,) = broker.queue()
    assert queued.request.id == "big" and len(queued.victims) == 8


def test_draining_gang_that_times_out_frees_its_reservation() -> None:
    clock = FakeClock()
    broker = make_broker(clock, drain_after_s=0.0, max_draining=1)
    broker.submit(GangRequest("x", "a", 12))
    broker.submit(GangRequest("comm", "b", 8, hint=WorkloadHint(bound="communication"), timeout_s=50))
    assert broker.queue()[0].draining and broker.free_gpus() == 0
    clock.now = 50
    assert [type(e) for e in broker.advance()] == [TimedOut]
    assert broker.free_gpus() == 4 and broker.usage("b") == 0


def test_small_gangs_fill_fragments_and_keep_whole_domains_free() -> None:
    clock = FakeClock()
    broker = make_broker(clock, topology=synthetic_topology(4, 8))
    broker.submit(GangRequest("five", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    events = broker.submit(GangRequest("two", "a", 2))
    five_node = next(le for le in broker.leases() if le.id == "five").gpus[0].split("/")[0]
    assert {g.split("/")[0] for g in granted(events)["two"]} == {five_node}


def test_memory_bound_work_gets_largest_memory_gpus_and_preprocessing_the_smallest() -> None:
    clock = FakeClock()
    topology = synthetic_topology(4, 8, types=(("A100", 40.0), ("H200", 141.0)))
    broker = make_broker(clock, topology=topology)
    memory = broker.submit(GangRequest("mem", "a", 2, hint=WorkloadHint(bound="memory")))
    prep = broker.submit(GangRequest("prep", "a", 2, hint=WorkloadHint(kind="preprocessing")))
    by_id = {g.id: g for g in topology.gpus}
    assert {by_id[g].memory_gb for g in granted(memory)["mem"]} == {141.0}
    assert {by_id[g].memory_gb for g in granted(prep)["prep"]} == {40.0}


def test_gpu_type_filter_is_respected() -> None:
    clock = FakeClock()
    topology = synthetic_topology(2, 8, types=(("A100", 40.0), ("H200", 141.0)))
    broker = make_broker(clock, topology=topology)
    events = broker.submit(GangRequest("h", "a", 3, gpu_type="H200"))
    assert {g.startswith("n001") for g in granted(events)["h"]} == {True}


# --- quotas, borrowing, reclaim ----------------------------------------------------------------


def cohort_quotas(borrowing_limit: int | None = None) -> list[TenantQuota]:
    return [
        TenantQuota("a", 8, borrowing_limit=borrowing_limit, cohort="lab"),
        TenantQuota("b", 8, borrowing_limit=borrowing_limit, cohort="lab"),
    ]


def test_tenant_borrows_unused_quota_of_its_cohort() -> None:
    broker = make_broker(FakeClock(), cohort_quotas())
    assert len(granted(broker.submit(GangRequest("a1", "a", 12)))["a1"]) == 12
    assert broker.usage("a") == 12


def test_borrowing_limit_caps_what_a_tenant_borrows() -> None:
    broker = make_broker(FakeClock(), cohort_quotas(borrowing_limit=2))
    with pytest.raises(BrokerError, match="may ever hold"):
        broker.submit(GangRequest("too-big", "a", 11))
    assert granted(broker.submit(GangRequest("a1", "a", 10)))
    assert granted(broker.submit(GangRequest("a2", "a", 1))) == {}  # 6 GPUs free, quota spent
    assert broker.free_gpus() == 6


def test_without_a_cohort_there_is_no_borrowing() -> None:
    broker = make_broker(FakeClock(), [TenantQuota("a", 4), TenantQuota("b", 12)])
    assert granted(broker.submit(GangRequest("a1", "a", 4)))
    assert granted(broker.submit(GangRequest("a2", "a", 1))) == {}
    assert broker.free_gpus() == 12


def test_lender_reclaims_borrowed_capacity_with_notice() -> None:
    clock = FakeClock()
    broker = make_broker(clock, cohort_quotas(), grace_s=60.0)
    broker.submit(GangRequest("a-old", "a", 8))
    clock.now = 1
    broker.submit(GangRequest("a-new", "a", 6))  # borrows 6 of b's quota
    clock.now = 2
    events = broker.submit(GangRequest("b1", "b", 4))
    notices = only(events, CheckpointNotice)
    # Only the borrowed lease is reclaimed, and one victim is enough.
    assert [(n.lease.id, n.reason, n.deadline) for n in notices] == [("a-new", "reclaim", 62.0)]
    assert granted(events) == {}
    clock.now = 30
    events = broker.release("a-new")
    assert len(granted(events)["b1"]) == 4
    assert broker.usage("a") == 8 and broker.usage("b") == 4


def test_tenant_within_nominal_is_not_reclaimed_from() -> None:
    clock = FakeClock()
    broker = make_broker(clock, cohort_quotas())
    broker.submit(GangRequest("a1", "a", 8))
    broker.submit(GangRequest("b1", "b", 8))
    events = broker.submit(GangRequest("b2", "b", 2))
    assert events == []
    assert {lease.state for lease in broker.leases()} == {"active"}


def test_priority_never_preempts_another_tenant_within_its_quota() -> None:
    clock = FakeClock()
    broker = make_broker(clock, [TenantQuota("a", 8, cohort="lab"), TenantQuota("b", 8, cohort="lab")])
    broker.submit(GangRequest("a-low", "a", 8, priority=0))
    broker.submit(GangRequest("b-low", "b", 8, priority=0))
    assert broker.submit(GangRequest("a-high", "a", 8, priority=5)) != []  # preempts a-low only
    assert {le.id: le.state for le in broker.leases()} == {"a-low": "notified", "b-low": "active"}


# --- preemption ----------------------------------------------------------------------------------


def test_preempted_lease_gets_notice_and_grace_and_gpus_move_only_after() -> None:
    clock = FakeClock()
    broker = make_broker(clock, grace_s=60.0)
    victim_gpus = granted(broker.submit(GangRequest("low", "a", 16, priority=0)))["low"]
    clock.now = 10
    events = broker.submit(GangRequest("high", "a", 8, priority=2))
    (notice,) = only(events, CheckpointNotice)
    assert notice.lease.id == "low" and notice.deadline == 70.0 and notice.preemptor == "high"
    assert notice.reason == "priority"
    assert granted(events) == {}
    (low,) = broker.leases()
    assert low.state == "notified" and low.gpus == victim_gpus  # still holds every GPU
    (queued,) = broker.queue()
    assert queued.victims == ("low",) and len(queued.nominated) == 8
    clock.now = 69.9
    assert granted(broker.advance()) == {}
    clock.now = 40
    events = broker.release("low")  # checkpoint done early
    assert [type(e) for e in events] == [LeaseEnded, Granted]
    assert granted(events)["high"] == queued.nominated
    assert broker.free_gpus() == 8


def test_grace_end_takes_the_gpus_even_if_the_victim_never_answers() -> None:
    clock = FakeClock()
    broker = make_broker(clock, grace_s=60.0)
    broker.submit(GangRequest("low", "a", 16, priority=0, ttl_s=10_000))
    broker.submit(GangRequest("high", "a", 16, priority=1))
    clock.now = 59
    assert broker.advance() == []
    clock.now = 60
    events = broker.advance()
    assert [(type(e), getattr(e, "reason", None)) for e in events] == [
        (LeaseEnded, "preempted"),
        (Granted, None),
    ]


def test_reserved_gpus_are_not_given_to_others_during_grace() -> None:
    clock = FakeClock()
    broker = make_broker(clock, grace_s=60.0)
    broker.submit(GangRequest("low", "a", 12, priority=0))
    broker.submit(GangRequest("high", "a", 16, priority=1))  # reserves the 4 free GPUs too
    assert broker.free_gpus() == 0
    assert granted(broker.submit(GangRequest("small", "b", 1, priority=9))) == {}


def test_notified_lease_cannot_renew_past_its_notice_deadline() -> None:
    clock = FakeClock()
    broker = make_broker(clock, grace_s=60.0)
    broker.submit(GangRequest("low", "a", 16))
    broker.submit(GangRequest("high", "a", 16, priority=1))
    clock.now = 50
    broker.renew("low")
    clock.now = 60
    assert [e.lease.id for e in only(broker.advance(), Granted)] == ["high"]


def test_withdrawn_preemptor_frees_its_reservation() -> None:
    clock = FakeClock()
    broker = make_broker(clock)
    broker.submit(GangRequest("low", "a", 12))
    broker.submit(GangRequest("high", "a", 16, priority=1))
    assert broker.free_gpus() == 0
    broker.release("high")
    assert broker.free_gpus() == 4
    assert broker.usage("a") == 0  # the notified victim is no longer charged


# --- expiry --------------------------------------------------------------------------------------


def test_dead_holder_releases_its_gpus_at_expiry() -> None:
    clock = FakeClock()
    broker = make_broker(clock, ttl_s=30.0)
    broker.submit(GangRequest("holder", "a", 16))
    broker.submit(GangRequest("next", "b", 8, timeout_s=500))
    clock.now = 20
    assert broker.renew("holder").expires_at == 50
    clock.now = 49.9  # the holder dies: no more renewals
    assert broker.advance() == []
    clock.now = 50
    events = broker.advance()
    assert [(type(e), getattr(e, "reason", None)) for e in events] == [
        (LeaseEnded, "expired"),
        (Granted, None),
    ]
    with pytest.raises(LeaseLost):
        broker.renew("holder")


def test_next_deadline_names_the_next_expiry() -> None:
    clock = FakeClock()
    broker = make_broker(clock, ttl_s=30.0)
    assert broker.next_deadline() is None
    broker.submit(GangRequest("x", "a", 1))
    assert broker.next_deadline() == 30.0


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (GangRequest("x", "nobody", 1), "unknown tenant"),
        (GangRequest("x", "a", 17), "may ever hold"),
        (
            GangRequest("x", "a", 9, topology=TopologyConstraint("nvlink_domain")),
            "never fit in one nvlink_domain",
        ),
        (GangRequest("x", "a", 2, gpu_type="B200"), "match its filters"),
    ],
)
def test_impossible_requests_are_refused_and_change_nothing(request_: GangRequest, match: str) -> None:
    broker = make_broker(FakeClock())
    with pytest.raises(BrokerError, match=match):
        broker.submit(request_)
    assert broker.queue() == [] and broker.leases() == [] and broker.free_gpus() == 16


def test_malformed_requests_and_duplicate_ids_are_refused() -> None:
    with pytest.raises(BrokerError, match="at least 1"):
        GangRequest("x", "a", 0)
    with pytest.raises(BrokerError, match="timeout_s"):
        GangRequest("x", "a", 1, timeout_s=-1)
    with pytest.raises(BrokerError, match="gpus must be an integer"):
        GangRequest("x", "a", "8")  # type: ignore[arg-type]
    with pytest.raises(BrokerError, match="ttl_s"):
        GangRequest("x", "a", 1, ttl_s=float("nan"))
    with pytest.raises(BrokerError, match="must be integers"):
        TenantQuota("a", 2.5)  # type: ignore[arg-type]
    with pytest.raises(BrokerError, match=">= 0"):
        TenantQuota("a", 4, borrowing_limit=-1)
    broker = make_broker(FakeClock())
    broker.submit(GangRequest("x", "a", 1))
    with pytest.raises(BrokerError, match="already live"):
        broker.submit(GangRequest("x", "a", 1))
    with pytest.raises(LeaseLost):
        broker.release("nope")


def test_infinite_locality_wait_never_spreads_a_communication_bound_gang() -> None:
    clock = FakeClock()
    broker = make_broker(clock, locality_wait_s=float("inf"))
    broker.submit(GangRequest("x", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    broker.submit(GangRequest("y", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    comm = GangRequest("comm", "b", 6, hint=WorkloadHint(bound="communication"), timeout_s=900)
    assert broker.submit(comm) == []
    assert broker.next_deadline() == 900
    clock.now = 899
    assert broker.advance() == []


@pytest.mark.parametrize("setting", [{"ttl_s": -1.0}, {"grace_s": float("inf")}, {"locality_wait_s": -5.0}])
def test_broker_settings_are_checked(setting: dict[str, float]) -> None:
    with pytest.raises(BrokerError, match="must be"):
        Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], **setting)  # type: ignore[arg-type]


def test_a_tenant_cannot_have_two_quotas() -> None:
    with pytest.raises(BrokerError, match="two quotas"):
        Broker(synthetic_topology(1, 8), [TenantQuota("a", 4), TenantQuota("a", 4)])


def test_inference_gang_prefers_one_node_where_a_compute_gang_fills_fragments() -> None:
    broker = make_broker(FakeClock(), topology=synthetic_topology(2, 8, domains_per_node=4))
    holders = {}
    for k in range(16):
        (gpu,) = granted(broker.submit(GangRequest(f"f{k}", "a", 1)))[f"f{k}"]
        holders[gpu] = f"f{k}"
    for gpu in ("n000/g0", "n000/g2", "n001/g0", "n001/g2", "n001/g4", "n001/g6"):
        broker.release(holders[gpu])
    inference = GangRequest("serve", "b", 4, hint=WorkloadHint(kind="inference"))
    assert {g.split("/")[0] for g in granted(broker.submit(inference))["serve"]} == {"n001"}
    broker.release("serve")
    batch = granted(broker.submit(GangRequest("batch", "b", 4)))["batch"]
    assert {g.split("/")[0] for g in batch} == {"n000", "n001"}


# --- queue order and preemption victims -------------------------------------------------------


def _broker(clock: FakeClock, tenants: Sequence[str] = ("a", "b", "c")) -> Broker:
    topology = synthetic_topology(2, 8)
    quotas = [BrokerQuota(t, len(topology)) for t in tenants]
    return Broker(topology, quotas, clock=clock, ttl_s=1000.0, grace_s=60.0, locality_wait_s=100.0)


def test_a_freed_node_goes_to_the_higher_priority_of_two_waiting_gangs() -> None:
    """Kills: the queue ordered by ascending priority (``_Queue.ordered``): the less important
    gang, which came first, takes the GPUs that free up."""
    clock = FakeClock()
    broker = _broker(clock)
    assert len(granted(broker.submit(GangRequest("x", "a", 8)))["x"]) == 8
    assert len(granted(broker.submit(GangRequest("y", "a", 8)))["y"]) == 8
    clock.now = 1.0
    assert granted(broker.submit(GangRequest("low", "b", 8, priority=0))) == {}
    clock.now = 2.0
    assert granted(broker.submit(GangRequest("high", "c", 8, priority=5))) == {}
    clock.now = 3.0
    events = broker.release("x")
    assert set(granted(events)) == {"high"}
    assert [q.request.id for q in broker.queue()] == ["low"]


def test_a_preemption_notifies_only_the_victims_the_gang_needs() -> None:
    """Kills: the victim set not minimized (``_try_preempt``): a small low-priority lease taken
    first on the way to a large one that alone makes room is preempted too, for nothing."""
    clock = FakeClock()
    broker = _broker(clock)
    assert len(granted(broker.submit(GangRequest("keep", "a", 6, priority=9)))["keep"]) == 6
    clock.now = 1.0
    assert len(granted(broker.submit(GangRequest("big", "a", 8, priority=1)))["big"]) == 8
    clock.now = 2.0
    assert len(granted(broker.submit(GangRequest("small", "a", 2, priority=0)))["small"]) == 2
    assert broker.free_gpus() == 0
    clock.now = 3.0
    events = broker.submit(GangRequest("urgent", "a", 8, priority=5))
    notices = [e for e in events if isinstance(e, CheckpointNotice)]
    assert [n.lease.id for n in notices] == ["big"]
    assert {lease.id for lease in broker.leases()} >= {"keep", "small"}


# --- reclaim, notified leases, the locality wait ----------------------------------------------


def test_reclaim_stops_once_the_lender_is_back_within_its_nominal_quota() -> None:
    """Kills: the "lender still borrowing after earlier victims" check dropped (``_try_preempt``):
    a lender borrowing 2 GPUs lost a further 4-GPU lease of its nominal quota to a reclaim.
    Rule: reclaim takes back only what the lender borrowed; once the victims chosen so far bring
    it back to its nominal quota, no more of its leases are candidates (Kueue's rule), so the
    reclaiming gang waits rather than take the lender below its guarantee."""
    clock = FakeClock()
    topology = synthetic_topology(2, 8, domains_per_node=2)  # four NVLink domains of 4 GPUs
    quotas = [
        BrokerQuota("a", 8, cohort="lab"),
        BrokerQuota("b", 8, cohort="lab"),
        BrokerQuota("c", 4),  # no cohort: takes GPUs, not the cohort's quota
    ]
    broker = Broker(topology, quotas, clock=clock, ttl_s=1000.0, grace_s=60.0)
    domain = TopologyConstraint("nvlink_domain", required=True)
    for i, (rid, tenant, gpus, prio) in enumerate(
        [("b1", "b", 4, 1), ("b2", "b", 4, 1), ("a1", "a", 4, 0), ("c1", "c", 2, 0), ("bx", "b", 2, 0)]
    ):
        clock.now = float(i)
        assert rid in granted(broker.submit(GangRequest(rid, tenant, gpus, priority=prio, topology=domain)))
    assert broker.free_gpus() == 0
    assert broker.usage("b") == 10  # borrowing 2 of a's nominal quota
    clock.now = 10.0
    events = broker.submit(GangRequest("a2", "a", 4, topology=domain))
    # bx (2 GPUs, b's only borrowed ones) frees no whole domain: c1 holds the rest of it.
    assert [e for e in events if isinstance(e, CheckpointNotice)] == []
    assert broker.usage("b") == 10
    assert [q.request.id for q in broker.queue()] == ["a2"]


def test_next_deadline_names_a_notified_leases_expiry_when_it_comes_before_its_notice() -> None:
    """Kills: ``next_deadline`` taking a notified lease's notice deadline alone (a holder that
    stopped renewing expires at 30, before its notice deadline at 130: a driver sleeping until
    130 left its GPUs and the preemptor idle for 100 s).
    Rule: a notified lease ends at the earlier of its expiry and its notice deadline, and
    ``next_deadline`` names that time."""
    clock = FakeClock()
    broker = Broker(synthetic_topology(1, 8), [BrokerQuota("a", 8)], clock=clock, ttl_s=30.0, grace_s=120.0)
    assert "low" in granted(broker.submit(GangRequest("low", "a", 8, priority=0)))
    clock.now = 10.0
    events = broker.submit(GangRequest("high", "a", 8, priority=5))
    assert [(e.lease.id, e.deadline) for e in events if isinstance(e, CheckpointNotice)] == [("low", 130.0)]
    assert broker.next_deadline() == 30.0
    clock.now = 30.0
    assert "high" in granted(broker.advance())


def _three_fragmented_nodes(clock: FakeClock, **settings: float) -> Broker:
    """Three nodes of 8 GPUs (one NVLink domain each), 3 GPUs free on each: 9 free, no domain whole."""
    broker = Broker(synthetic_topology(3, 8), [BrokerQuota("a", 24)], clock=clock, ttl_s=1e6, **settings)
    domain = TopologyConstraint("nvlink_domain", required=True)
    for name in ("x", "y", "z"):
        assert name in granted(broker.submit(GangRequest(name, "a", 5, topology=domain)))
    assert broker.free_gpus() == 9
    return broker


def test_a_communication_bound_gang_the_size_of_a_domain_waits_for_one() -> None:
    """Kills: ``_local_possible``'s ``largest >= request.gpus`` made strict (a communication-bound
    gang of exactly one domain's 8 GPUs was taken for one no domain could ever hold, and spread
    over three nodes at once instead of waiting for a domain).
    Rule: a gang some NVLink domain could hold waits for one (up to the locality wait)."""
    clock = FakeClock()
    broker = _three_fragmented_nodes(clock, locality_wait_s=100.0)
    comm = GangRequest("comm", "a", 8, hint=WorkloadHint(bound="communication"))
    assert granted(broker.submit(comm)) == {}
    assert [q.request.id for q in broker.queue()] == ["comm"]
    clock.now = 50.0
    [gpus] = granted(broker.release("x")).values()  # node 0's domain is whole again
    topology = broker.topology
    assert len({topology.group_of["nvlink_domain"][topology.number(g)] for g in gpus}) == 1


def test_a_gang_spreads_at_the_time_next_deadline_names_for_its_locality_wait() -> None:
    """Kills: the locality wait counted as over only after ``locality_wait_s`` (``>`` for ``>=``
    in ``_place_waiting``): a driver that advances at ``next_deadline()`` (submit + the wait)
    found nothing placed, and ``next_deadline`` no longer named the wait, so the gang slept to
    its timeout.
    Rule: at ``submitted_at + locality_wait_s`` the wait is over: ``advance`` then places it."""
    clock = FakeClock()
    broker = _three_fragmented_nodes(clock, locality_wait_s=100.0)
    comm = GangRequest("comm", "a", 8, hint=WorkloadHint(bound="communication"), timeout_s=3600.0)
    assert granted(broker.submit(comm)) == {}
    assert broker.next_deadline() == 100.0
    clock.now = 100.0
    assert "comm" in granted(broker.advance())


def test_a_tenant_gets_no_new_grant_past_its_quota_while_its_reclaimed_lease_checkpoints() -> None:
    """Kills: the grant-time quota check counting notified leases dropped (``_place_waiting``'s
    ``fits(..., with_leaving=True)``): a tenant whose 12-GPU lease was being reclaimed was
    granted 8 more GPUs during its grace, holding 20 where its quota allows 16.
    Rule: a notified lease's GPUs count against a new grant to its tenant and cohort until it
    ends; the request waits for them (their grace bounds the wait), then is granted."""
    clock = FakeClock()
    topology = synthetic_topology(3, 8)
    quotas = [BrokerQuota("x", 8, cohort="lab"), BrokerQuota("y", 8, cohort="lab")]
    broker = Broker(topology, quotas, clock=clock, ttl_s=1000.0, grace_s=60.0)
    assert "x1" in granted(broker.submit(GangRequest("x1", "x", 12)))  # borrows 4 of y's
    clock.now = 1.0
    events = broker.submit(GangRequest("y1", "y", 8))
    assert [(e.lease.id, e.reason) for e in events if isinstance(e, CheckpointNotice)] == [("x1", "reclaim")]
    assert broker.free_gpus() >= 8
    clock.now = 2.0
    assert granted(broker.submit(GangRequest("x2", "x", 8))) == {}  # x still holds x1's 12
    held = sum(len(lease.gpus) for lease in broker.leases() if lease.tenant == "x")
    assert held <= 16
    clock.now = 3.0
    assert set(granted(broker.release("x1"))) == {"y1", "x2"}


# --- draining ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_draining", [1, 2])
def test_no_more_than_max_draining_gangs_drain_at_once(max_draining: int) -> None:
    """Mutant n18 (_broker.py _try_drain: ``>= max_draining`` made ``>``: one gang too many drains).

    At most ``max_draining`` gangs reserve GPUs by draining at once (docs/broker.md, Draining):
    the GPUs they reserve sit idle, so one more is idle capacity nobody allowed.
    """
    clock = FakeClock()
    topology = synthetic_topology(4, 8)
    tenants = ("a", "b", "c", "d", "e")
    broker = Broker(
        topology,
        [TenantQuota(t, len(topology)) for t in tenants],
        clock=clock,
        ttl_s=1000.0,
        grace_s=60.0,
        locality_wait_s=10_000.0,
        drain_after_s=0.0,
        max_draining=max_draining,
    )
    for n in range(4):  # every domain left with 3 free GPUs
        broker.submit(GangRequest(f"f{n}", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    assert broker.free_gpus() == 12
    for tenant in tenants[1:]:  # four gangs, each waiting for 4 GPUs in one domain
        broker.submit(GangRequest(f"comm-{tenant}", tenant, 4, hint=WorkloadHint(bound="communication")))
    clock.now = 1.0
    broker.advance()
    queue = broker.queue()
    assert len(queue) == 4
    assert sum(q.draining for q in queue) == max_draining
    assert broker.free_gpus() == 12 - 3 * max_draining  # each drain reserves its domain's 3 free


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"priority": MAX_PRIORITY + 1}, "priority must be between -2147483648 and 2147483647"),
        ({"priority": MIN_PRIORITY - 1}, "priority must be between"),
        ({"priority": -(2**70)}, "priority must be between .* got an integer of more than 18 digits"),
        ({"priority": 10**5000}, "got an integer of more than 18 digits"),  # past what Python writes
        ({"timeout_s": 10**400}, "timeout_s must be finite and >= 0, got an integer of more than 18"),
        ({"ttl_s": 10**400}, "ttl_s must be finite"),
        ({"min_memory_gb": 10**400}, "min_memory_gb must be finite"),
        ({"id": "ft-\ud800"}, "id is not valid Unicode text"),
        ({"holder": "agent-\udfff"}, "holder is not valid Unicode text"),
        ({"gpu_type": "H\ud800"}, "gpu_type is not valid Unicode text"),
    ],
    ids=lambda v: "" if isinstance(v, str) else "-".join(v),
)
def test_a_request_no_journal_could_hold_is_refused_when_made(fields: dict[str, object], match: str) -> None:
    # Each used to be granted and then fail the journal's write (OverflowError, StoreError), and
    # every later write after it, for every tenant, while the lease lived; or, for a time too
    # large for a float, raise OverflowError. An agent whose policy bounds priority from above
    # only (``priority: {le: 1}``) could wedge the broker with priority -2**70.
    with pytest.raises(BrokerError, match=match):
        GangRequest(**{"id": "x", "tenant": "a", "gpus": 1, **fields})  # type: ignore[arg-type]


def test_a_request_id_is_at_most_max_request_id_characters_and_a_longer_one_is_not_quoted_whole() -> None:
    # A 1 MB id was queued, and the broker wrote it into its journal at every change of any
    # tenant (8 such leases: 0.5 s a call instead of 3 ms) and quoted it whole in its errors.
    broker = make_broker(FakeClock())
    broker.submit(GangRequest("r" * MAX_REQUEST_ID, "a", 1))
    with pytest.raises(BrokerError, match=r"\(1000000 characters\): an id is at most 256") as caught:
        GangRequest("x" * 1_000_000, "a", 1)
    assert len(str(caught.value)) < 200
    assert [lease.id for lease in broker.leases()] == ["r" * MAX_REQUEST_ID]


def test_the_extreme_priorities_are_requests() -> None:
    broker = make_broker(FakeClock())
    broker.submit(GangRequest("low", "a", 1, priority=MIN_PRIORITY))
    broker.submit(GangRequest("high", "a", 1, priority=MAX_PRIORITY))
    assert {lease.priority for lease in broker.leases()} == {MIN_PRIORITY, MAX_PRIORITY}


@pytest.mark.parametrize("value", [10**400, True, "60"], ids=["huge-integer", "bool", "text"])
def test_a_broker_setting_that_is_no_usable_number_is_a_broker_error(value: object) -> None:
    with pytest.raises(BrokerError, match="ttl_s must be finite and >= 0"):
        Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], ttl_s=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_of", "quota", "match"),
    [
        (lambda: GangRequest("x", "a", -(10**5000)), 8, "gpus must be at least 1, got an integer of more"),
        (lambda: GangRequest("x", "a", 10**5000), 8, "an integer of more than 18 digits GPUs exceed"),
        (lambda: GangRequest("x", "a", 10**5000), 10**4999, r"may ever hold \(an integer of more than 18"),
        (
            lambda: GangRequest("x", "a", 10**5000, topology=TopologyConstraint("node")),
            10**5000,
            "an integer of more than 18 digits GPUs never fit in one node",
        ),
        (lambda: GangRequest("x", "a", 10**5000), 10**5000, "GPUs but only 16 match its filters"),
    ],
    ids=["negative", "above-the-quota", "above-a-huge-quota", "above-every-node", "above-the-cluster"],
)
def test_a_gang_of_more_digits_than_python_writes_is_a_broker_error(
    request_of: object, quota: int, match: str
) -> None:
    """Review R56: a gang or quota of more than 4,300 digits raised ValueError (no str() of it), not BrokerError."""
    # priority got shown_number in review R51; gpus, and the ceiling quoted beside it, did not.
    broker = make_broker(FakeClock(), quotas=[TenantQuota("a", quota)])
    with pytest.raises(BrokerError, match=match):
        broker.submit(request_of())  # type: ignore[operator]
    assert broker.leases() == [] and broker.queue() == []


def test_a_snapshot_naming_a_gang_of_more_digits_than_python_writes_is_a_broker_error() -> None:
    """Review R56: restoring a queued gang of more than 4,300 digits raised ValueError, not BrokerError."""
    gpu = synthetic_topology(2, 8).gpus[0].id
    waiting = QueuedRequest(GangRequest("x", "a", 10**5000), 0.0, 60.0, nominated=(gpu,))
    broker = make_broker(FakeClock())
    with pytest.raises(BrokerError, match="holds 1 GPUs for a gang of an integer of more than 18 digits"):
        broker.restore(BrokerSnapshot(0.0, (), (waiting,)))
    assert broker.queue() == []


def test_a_broker_restored_on_a_host_whose_clock_is_behind_still_expires_a_dead_holders_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R56: a broker restored where the wall clock is behind the snapshot's kept every lease that much longer."""
    wall, steady = [10_000.0], [0.0]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    monkeypatch.setattr(time, "monotonic", lambda: steady[0])
    quotas = [TenantQuota("a", 8)]
    broker = Broker(synthetic_topology(1, 8), quotas, ttl_s=60.0)  # the default clock
    broker.submit(GangRequest("ft-1", "a", 8))
    steady[0] += 50
    assert broker.renew("ft-1").expires_at == 10_110.0
    saved = broker.snapshot()
    # The process dies with the lease's holder; the broker restarts on a host an hour behind.
    wall[0], steady[0] = 10_050.0 - 3600, 7.0
    restored = Broker(synthetic_topology(1, 8), quotas, ttl_s=60.0)
    restored.restore(saved)
    steady[0] += 61  # past the lease's expiry: 60 s after its last renewal, 11 s after the save
    assert [(e.lease.id, e.reason, e.at) for e in only(restored.advance(), LeaseEnded)] == [
        ("ft-1", "expired", 10_111.0)  # its time held, 111 s, as a settlement reads it
    ]
    assert restored.free_gpus() == 8
    assert restored.clock() == saved.taken_at + 61  # time on it never runs back past what it saved
