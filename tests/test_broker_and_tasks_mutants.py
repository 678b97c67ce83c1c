"""Review r47 (mutation, tasks): the task scheduler and the GPU broker.

Each test pins a rule that a hand-made mutant of agentgate/tasks/ or agentgate/dispatch/broker/
(or the router's diagnostic candidates) survived the earlier suites with; the mutant it kills is
named in its docstring. Real components only: the broker and router in process, in simulated
time; the scheduler on real asyncio.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.broker import (
    Broker,
    BrokerEvent,
    CheckpointNotice,
    GangRequest,
    GpuSpec,
    Granted,
    Topology,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.dispatch.broker import TenantQuota as BrokerQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import CircuitOpen, DeadlineExceeded
from agentgate.sim import chain_hashes
from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _granted(events: Sequence[BrokerEvent]) -> dict[str, tuple[str, ...]]:
    return {e.lease.id: e.lease.gpus for e in events if isinstance(e, Granted)}


# --- the GPU broker: reclaim, nested domains, spreading -----------------------------------------


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
        assert rid in _granted(broker.submit(GangRequest(rid, tenant, gpus, priority=prio, topology=domain)))
    assert broker.free_gpus() == 0
    assert broker.usage("b") == 10  # borrowing 2 of a's nominal quota
    clock.now = 10.0
    events = broker.submit(GangRequest("a2", "a", 4, topology=domain))
    # bx (2 GPUs, b's only borrowed ones) frees no whole domain: c1 holds the rest of it.
    assert [e for e in events if isinstance(e, CheckpointNotice)] == []
    assert broker.usage("b") == 10
    assert [q.request.id for q in broker.queue()] == ["a2"]


def _gpu(gid: str, node: str, domain: str) -> GpuSpec:
    return GpuSpec(id=gid, type="H100", memory_gb=80.0, node=node, nvlink_domain=domain, rack="r0")


def test_a_gang_held_to_one_node_never_lands_on_an_nvlink_domain_that_spans_two() -> None:
    """Kills: the nested-group filter dropped in ``_inside_one`` (a communication-bound gang that
    must stay on one node was placed on a 4-GPU NVLink domain spanning both nodes).
    Rule: with a constraint at ``node``, an inner-level group counts only when it lies inside one
    node (an NVL72-like domain across nodes is not "one node"); the gang goes to a whole node."""
    gpus = []
    for node in ("n0", "n1"):
        gpus += [_gpu(f"{node}/g0", node, "wide"), _gpu(f"{node}/g1", node, "wide")]
        gpus += [_gpu(f"{node}/g2", node, f"{node}/own"), _gpu(f"{node}/g3", node, f"{node}/own")]
    topology = Topology(tuple(gpus))
    broker = Broker(topology, [BrokerQuota("a", 8)], clock=FakeClock(), ttl_s=1000.0)
    request = GangRequest(
        "g",
        "a",
        4,
        hint=WorkloadHint(bound="communication"),
        topology=TopologyConstraint("node", required=True),
    )
    [lease_gpus] = _granted(broker.submit(request)).values()
    assert {topology.gpus[topology.number(g)].node for g in lease_gpus} == {"n0"}
    [lease] = broker.leases()
    assert lease.level == "node"


def test_a_communication_bound_gang_that_spreads_takes_the_fewest_domains() -> None:
    """Kills: the domain order of ``_fill`` not reversed for communication-bound gangs (a gang
    of 5 spread over three domains, 1 + 1 + 3 GPUs, where 4 + 1 was free).
    Rule: a communication-bound gang that cannot fit one NVLink domain takes the fewest, largest
    domains of its group (here its node), not the most fragmented ones."""
    clock = FakeClock()
    topology = synthetic_topology(1, 12, domains_per_node=3)  # three NVLink domains of 4
    broker = Broker(topology, [BrokerQuota("a", 12)], clock=clock, ttl_s=1000.0)
    domain = TopologyConstraint("nvlink_domain", required=True)
    assert "f0" in _granted(broker.submit(GangRequest("f0", "a", 3, topology=domain)))
    assert "f1" in _granted(broker.submit(GangRequest("f1", "a", 3, topology=domain)))
    of = topology.group_of["nvlink_domain"]
    taken = {g for lease in broker.leases() for g in lease.gpus}
    free = [sum(1 for i in m if topology.gpus[i].id not in taken) for m in topology.members["nvlink_domain"]]
    assert free == [1, 1, 4]
    clock.now = 1.0
    # 5 GPUs: more than any domain, so placed at once as after the locality wait (one node).
    [spread] = _granted(
        broker.submit(GangRequest("comm", "a", 5, hint=WorkloadHint(bound="communication")))
    ).values()
    assert len({of[topology.number(g)] for g in spread}) == 2


# --- the router's diagnostic candidates ---------------------------------------------------------


def _pool(n: int) -> object:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": f"http://127.0.0.1:{9100 + i}", "models": ["m"]} for i in range(n)
            ]
        }
    )


def test_each_routing_candidate_reports_the_prefix_cached_on_that_backend() -> None:
    """Kills: ``Candidate.cached_tokens`` reported as 0 for every backend (``Router.choose``).
    Rule: ``RoutePlan.candidates`` (public, diagnostic) gives each backend's own predicted cache
    hit: the backend holding the prompt's prefix shows it, equal to the plan's ``cached_tokens``,
    and the others show none."""
    router = Router(_pool(3))  # type: ignore[arg-type]
    hashes = chain_hashes((7, b) for b in range(500))
    first = router.route(
        RouteRequest(id="r1", model="m", prompt_tokens=8000, max_output_tokens=100, prefix_hashes=hashes), 0.0
    )
    router.first_token("r1", 0.5)
    router.finished("r1", 1.0)
    again = router.route(
        RouteRequest(
            id="r2",
            model="m",
            prompt_tokens=8200,
            max_output_tokens=100,
            prefix_hashes=hashes,
            arrived_at=2.0,
        ),
        2.0,
    )
    assert again.backend == first.backend and again.cached_tokens > 0
    by_backend = {c.backend: c.cached_tokens for c in again.candidates}
    assert set(by_backend) == {"b0", "b1", "b2"}
    assert by_backend[first.backend] == again.cached_tokens
    assert all(v == 0 for b, v in by_backend.items() if b != first.backend)


# --- the task scheduler ---------------------------------------------------------------------


async def test_a_half_open_probe_cut_by_the_callers_deadline_is_given_back() -> None:
    """Kills: the probe of an attempt cut by the caller's own deadline not released
    (``Scheduler._failed``'s ``elif probe: breaker.release()``): the breaker stayed half-open
    with its only probe slot taken, refusing every later call with ``CircuitOpen`` for good.
    Rule: a cut attempt says nothing about the tool; its probe goes back, so the next call
    probes the tool and, succeeding, closes the breaker."""
    config = SchedulerConfig(
        tools={"search": ToolLimits(timeout_s=5.0)},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05),
    )
    scheduler = Scheduler(config)
    calls: list[str] = []

    async def down(attempt: Attempt) -> str:
        raise ConnectionRefusedError("upstream down")

    async def slow(attempt: Attempt) -> str:
        calls.append("slow")
        await asyncio.sleep(0.2)
        return "ok"

    async def fast(attempt: Attempt) -> str:
        calls.append("fast")
        return "ok"

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("search"), down)
    assert scheduler.breaker("tool:search").state is BreakerState.OPEN
    with pytest.raises(CircuitOpen):
        await scheduler.submit(ToolCall("search"), fast)
    await asyncio.sleep(0.06)
    assert scheduler.breaker("tool:search").state is BreakerState.HALF_OPEN
    with pytest.raises(DeadlineExceeded, match="did not finish"):
        await scheduler.submit(ToolCall("search", tenant="hasty", deadline=time.time() + 0.02), slow)
    assert scheduler.breaker("tool:search").state is BreakerState.HALF_OPEN
    assert await scheduler.submit(ToolCall("search", tenant="other"), fast) == "ok"
    assert calls == ["slow", "fast"]
    assert scheduler.breaker("tool:search").state is BreakerState.CLOSED
    await scheduler.aclose()


async def test_a_half_open_probe_given_up_before_its_tool_started_is_given_back(tmp_path: Path) -> None:
    """Kills: the probe of an attempt that gave up before its tool started not released (the
    ``if probing: breaker.release()`` of ``Scheduler.submit``'s attempt): a probe admitted, then
    refused its cross-process rate token before the deadline, kept the breaker's only probe
    slot, and the breaker refused every later call for good.
    Rule: an attempt that never ran says nothing about the tool; its half-open probe goes back."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(
        tools={"api": ToolLimits(rate=RateLimit(per_second=0.2, burst=1))},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05),
    )
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)  # two processes
    ran: list[str] = []

    async def down(attempt: Attempt) -> None:
        ran.append(attempt.call.tool)
        raise ConnectionRefusedError("upstream down")

    async def up(attempt: Attempt) -> None:
        ran.append(attempt.call.tool)

    await first.submit(ToolCall("api"), up)  # takes the shared token: the next is 5 s away
    with pytest.raises(ConnectionRefusedError):  # opens second's breaker of the backend
        await second.submit(ToolCall("other", breaker_key="backend:x"), down)
    breaker = second.breaker("backend:x")
    await asyncio.sleep(0.06)
    assert breaker.state is BreakerState.HALF_OPEN
    with pytest.raises(DeadlineExceeded, match="rate token"):
        await second.submit(ToolCall("api", breaker_key="backend:x", deadline=time.time() + 0.3), up)
    assert ran == ["api", "other"]
    assert breaker.admit() is True  # the probe slot is free again
    breaker.release()
    await first.aclose()
    await second.aclose()
    store.close()


def test_next_deadline_names_a_notified_leases_expiry_when_it_comes_before_its_notice() -> None:
    """Kills: ``next_deadline`` taking a notified lease's notice deadline alone (a holder that
    stopped renewing expires at 30, before its notice deadline at 130: a driver sleeping until
    130 left its GPUs and the preemptor idle for 100 s).
    Rule: a notified lease ends at the earlier of its expiry and its notice deadline, and
    ``next_deadline`` names that time."""
    clock = FakeClock()
    broker = Broker(synthetic_topology(1, 8), [BrokerQuota("a", 8)], clock=clock, ttl_s=30.0, grace_s=120.0)
    assert "low" in _granted(broker.submit(GangRequest("low", "a", 8, priority=0)))
    clock.now = 10.0
    events = broker.submit(GangRequest("high", "a", 8, priority=5))
    assert [(e.lease.id, e.deadline) for e in events if isinstance(e, CheckpointNotice)] == [("low", 130.0)]
    assert broker.next_deadline() == 30.0
    clock.now = 30.0
    assert "high" in _granted(broker.advance())


def _three_fragmented_nodes(clock: FakeClock, **settings: float) -> Broker:
    """Three nodes of 8 GPUs (one NVLink domain each), 3 GPUs free on each: 9 free, no domain whole."""
    broker = Broker(synthetic_topology(3, 8), [BrokerQuota("a", 24)], clock=clock, ttl_s=1e6, **settings)
    domain = TopologyConstraint("nvlink_domain", required=True)
    for name in ("x", "y", "z"):
        assert name in _granted(broker.submit(GangRequest(name, "a", 5, topology=domain)))
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
    assert _granted(broker.submit(comm)) == {}
    assert [q.request.id for q in broker.queue()] == ["comm"]
    clock.now = 50.0
    [gpus] = _granted(broker.release("x")).values()  # node 0's domain is whole again
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
    assert _granted(broker.submit(comm)) == {}
    assert broker.next_deadline() == 100.0
    clock.now = 100.0
    assert "comm" in _granted(broker.advance())


async def test_the_result_cache_keeps_no_more_results_than_its_size() -> None:
    """Kills: the result cache bound off by one (``len(results) > result_cache_size + 1`` in
    ``Scheduler.submit``: with ``result_cache_size=1`` a second result did not push out the
    first, and the first call's re-submission reused it instead of running).
    Rule: at most ``result_cache_size`` completed results are kept, the oldest dropped first."""
    scheduler = Scheduler(SchedulerConfig(result_cache_size=1))
    ran: list[str] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.call.call_id or "")
        return f"result of {attempt.call.call_id}"

    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), tool) == "result of c1"
    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c2"), tool) == "result of c2"
    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c2"), tool) == "result of c2"
    assert ran == ["c1", "c2"]  # c2 reused from the cache
    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), tool) == "result of c1"
    assert ran == ["c1", "c2", "c1"]  # c1 was pushed out by c2: it runs again
    await scheduler.aclose()


def test_a_lease_taken_after_its_call_gave_up_is_given_back(tmp_path: Path) -> None:
    """Kills: ``_Taking.take`` keeping a lease it took after ``abandon`` (the give-back dropped):
    a call cancelled while its worker thread was taking the tool's cross-process slot left the
    slot held, and renewed by the heartbeat, for good: a tool limited to one at once ran at
    none. (The window is a thread race; ``_Taking`` is driven in the order the race produces.)
    Rule: whichever of ``take`` and ``abandon`` comes second gives the lease back."""
    from agentgate.store.leases import LeaseManager
    from agentgate.tasks._scheduler import _Taking

    store = SQLiteStore(tmp_path / "s.db")
    manager, other = LeaseManager(store, holder="p1"), LeaseManager(store, holder="p2")
    taking = _Taking(manager, "tool:pay", 1)
    assert taking.abandon() is None  # the call gave up before the worker thread took the slot
    assert taking.take() is None
    assert manager.held() == 0
    assert other.try_acquire("tool:pay", 1) is not None  # the only slot is free
    manager.close()
    other.close()
    store.close()


def _counting() -> tuple[list[int], object]:
    ran: list[int] = []

    def tool(attempt: Attempt) -> int:
        ran.append(len(ran) + 1)
        return len(ran)

    return ran, tool


def test_a_call_that_must_not_reuse_a_result_runs_though_its_key_is_cached() -> None:
    """Kills: ``reuse_result`` ignored when reading the result cache (``SyncScheduler._keyed``
    and ``Scheduler.submit``: ``if key in results``): a call ``Gate.run`` marks as one to run
    (an operator settled its earlier run as not run) got the result kept in memory instead.
    Rule: ``reuse_result=False`` never serves a cached result, and its own is not kept."""
    ran, tool = _counting()
    sync = SyncScheduler()
    try:
        call = ToolCall("t", run_id="r", call_id="c1")
        assert sync.submit(call, tool) == 1  # type: ignore[arg-type]
        assert sync.submit(call, tool) == 1  # type: ignore[arg-type]  # reused
        again = ToolCall("t", run_id="r", call_id="c1", reuse_result=False)
        assert sync.submit(again, tool) == 2  # type: ignore[arg-type]
        assert sync.submit(call, tool) == 1  # type: ignore[arg-type]  # the run of ``again`` not kept
        assert ran == [1, 2]
    finally:
        sync.close()

    async def main() -> list[int]:
        scheduler = Scheduler()
        done: list[int] = []

        async def atool(attempt: Attempt) -> int:
            done.append(len(done) + 1)
            return len(done)

        assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), atool) == 1
        assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1", reuse_result=False), atool) == 2
        assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), atool) == 1
        await scheduler.aclose()
        return done

    assert asyncio.run(main()) == [1, 2]


@pytest.mark.parametrize("expired", ["deadline", "grant_expires_at"])
async def test_a_call_is_bound_by_the_earlier_of_its_deadline_and_its_grants_expiry(expired: str) -> None:
    """Kills: ``ToolCall.absolute_deadline`` taking the later of the two (``max`` for ``min``):
    a call whose grant had expired, given a far deadline of its own, still ran its tool (and
    one whose own deadline had passed ran under a far grant expiry).
    Rule: the call's deadline is the earlier of ``deadline`` and ``grant_expires_at``; past it
    the tool never starts."""
    now = time.time()
    times = {"deadline": now + 600.0, "grant_expires_at": now + 600.0, expired: now - 1.0}
    call = ToolCall("x", **times)  # type: ignore[arg-type]
    assert call.absolute_deadline() == now - 1.0
    scheduler = Scheduler()
    ran: list[int] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ran"

    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(call, tool)
    assert ran == []
    await scheduler.aclose()


async def test_a_dead_letter_the_store_refuses_is_counted_and_the_caller_gets_the_tools_error(
    tmp_path: Path,
) -> None:
    """Kills: ``_store_dead`` catching the wrong error (``ValueError`` for ``StoreError``): a
    store that refused the dead letter (its table gone) replaced the tool's error with a
    ``StoreError``, and the lost record was not counted.
    Rule: the caller gets the tool's own error whether or not its dead letter is stored; a
    dead letter the store refuses is counted (``dead_letter_not_stored``), not hidden."""
    import sqlite3

    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    scheduler = Scheduler(store=store)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("t"), down)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 0  # stored
    with sqlite3.connect(path) as other:  # another process drops the table: the next write fails
        other.execute("DROP TABLE agentgate_dead_letters")
    with pytest.raises(ConnectionRefusedError, match="upstream down"):
        await scheduler.submit(ToolCall("t"), down)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 1
    assert len(scheduler.dead_letters()) == 2  # kept in memory all the same
    await scheduler.aclose()
    store.close()


async def test_a_naive_datetime_deadline_is_an_input_error_never_a_guess_at_local_time() -> None:
    """Kills: the timezone check of ``_unix_time`` dropped (a naive ``datetime`` deadline was
    read as the host's local time: the same call got another deadline on each host's zone).
    Rule: a datetime deadline or grant expiry must be timezone-aware; a naive one is refused
    with ``InputError`` naming the field, and the tool never runs."""
    from datetime import datetime, timedelta

    from agentgate.errors import InputError

    scheduler = Scheduler()
    ran: list[int] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ran"

    for field in ("deadline", "grant_expires_at"):
        call = ToolCall("x", **{field: datetime.now() + timedelta(hours=1)})  # type: ignore[arg-type]
        with pytest.raises(InputError, match=f"{field} must be timezone-aware"):
            await scheduler.submit(call, tool)
    assert ran == []
    await scheduler.aclose()


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
    assert "x1" in _granted(broker.submit(GangRequest("x1", "x", 12)))  # borrows 4 of y's
    clock.now = 1.0
    events = broker.submit(GangRequest("y1", "y", 8))
    assert [(e.lease.id, e.reason) for e in events if isinstance(e, CheckpointNotice)] == [("x1", "reclaim")]
    assert broker.free_gpus() >= 8
    clock.now = 2.0
    assert _granted(broker.submit(GangRequest("x2", "x", 8))) == {}  # x still holds x1's 12
    held = sum(len(lease.gpus) for lease in broker.leases() if lease.tenant == "x")
    assert held <= 16
    clock.now = 3.0
    assert set(_granted(broker.release("x1"))) == {"y1", "x2"}


async def test_a_nul_in_a_dead_letters_text_is_stored_escaped(tmp_path: Path) -> None:
    """Kills: ``_storable`` passing text through unchanged (the NUL escape dropped): a run id a
    model made with a NUL was kept raw on SQLite, while PostgreSQL refuses the whole letter.
    Rule: a dead letter's text keeps a NUL as the four characters ``\\\\x00``, the same on both
    stores, so the letter is recorded (not counted as lost) and reads back alike."""
    from agentgate.store.dead_letters import DeadLetterStore

    store = SQLiteStore(tmp_path / "s.db")
    scheduler = Scheduler(store=store)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("t", run_id="run\x00x", call_id="c\x00"), down)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 0
    [letter] = DeadLetterStore(store).recent()
    assert (letter.run_id, letter.call_id) == ("run\\x00x", "c\\x00")
    await scheduler.aclose()
    store.close()


def test_a_gang_larger_than_its_cohort_is_refused_at_submit_whatever_its_borrowing_limit() -> None:
    """Kills: ``QuotaBook.ceiling`` ignoring the cohort when a borrowing limit is set (a 20-GPU
    gang of a tenant allowed to borrow 100 in a 16-GPU cohort was queued, to wait for ever for
    GPUs its cohort can never lend, instead of refused).
    Rule: a tenant may never hold more than the lesser of its nominal plus borrowing limit and
    its cohort's nominal total; a larger gang is a ``BrokerError`` at submit, changing nothing."""
    from agentgate.errors import BrokerError

    quotas = [BrokerQuota("x", 8, borrowing_limit=100, cohort="lab"), BrokerQuota("y", 8, cohort="lab")]
    broker = Broker(synthetic_topology(3, 8), quotas, clock=FakeClock())
    with pytest.raises(BrokerError, match=r"may ever hold \(16\)"):
        broker.submit(GangRequest("big", "x", 20))
    assert broker.queue() == [] and broker.free_gpus() == 24


def test_a_retry_policy_whose_cap_is_below_its_first_backoff_is_refused() -> None:
    """Kills: ``RetryPolicy``'s ``backoff_max_s >= backoff_initial_s`` check dropped (a policy
    written with the two swapped was taken, silently capping every backoff below the first).
    Rule: a configuration mistake is an ``InputError`` naming the fields, never a silent guess."""
    from agentgate.errors import InputError
    from agentgate.tasks import RetryPolicy

    with pytest.raises(InputError, match=r"backoff_max_s \(1.0\) must be >= backoff_initial_s \(2.0\)"):
        RetryPolicy(attempts=3, backoff_initial_s=2.0, backoff_max_s=1.0)
    assert RetryPolicy(attempts=3, backoff_initial_s=1.0, backoff_max_s=1.0).backoff_max_s == 1.0
