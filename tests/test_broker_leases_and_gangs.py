"""The GPU broker, the cross-process concurrency leases and the simulator.

Each test names the defect it pins: it failed on the code before its fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_broker_gated import Setup as GatedSetup

from agentgate.dispatch.broker import (
    Broker,
    CheckpointNotice,
    GangRequest,
    Granted,
    TenantQuota,
    TopologyConstraint,
    WorkloadHint,
    from_inventory,
    synthetic_topology,
)
from agentgate.dispatch.broker._topology import Topology
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import BrokerError, Denied, InputError, InventoryError, StoreError
from agentgate.sim import LLAMA_8B_H100, QWEN3_32B, Engine, EngineConfig, Send, SimRequest, replay
from agentgate.sim.traces import TraceRequest
from agentgate.store import Store, Transaction, open_store
from agentgate.store.broker_leases import BrokerLeaseStore
from agentgate.store.leases import LeaseManager

REPO = Path(__file__).resolve().parents[1]

# --- cross-process concurrency leases (agentgate/store/leases.py) ---------------------------------


class OutageStore:
    """``store`` with one injected fault: while ``down``, a transaction raises ``StoreError``
    (what a PostgreSQL restart or a locked SQLite file does to one call)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Transaction]:
        if self.down:
            raise StoreError("the store is unreachable (injected)")
        with self._store.transaction(immediate=immediate) as tx:
            yield tx


def test_a_slot_whose_release_failed_is_not_renewed_by_the_heartbeat_and_comes_back(store: Store) -> None:
    """The heartbeat renewed every row of its holder (``WHERE holder = ?``), so a slot whose
    release failed (the store was unreachable for that one call) was renewed for as long as the
    process held any other lease: the scheduler counts it ``lease_not_released`` and relies on it
    expiring within ``lease_ttl_s``, but it never did, and the shared limit lost a slot for good."""
    now = [1000.0]
    flaky = OutageStore(store)
    manager = LeaseManager(flaky, ttl_s=10.0, clock=lambda: now[0])  # type: ignore[arg-type]
    other = LeaseManager(store, ttl_s=10.0, clock=lambda: now[0])
    try:
        busy = manager.try_acquire("tool:busy", 1)  # held all along: the heartbeat keeps renewing
        lost = manager.try_acquire("tool:lost", 1)
        assert busy is not None and lost is not None
        flaky.down = True
        with pytest.raises(StoreError):
            manager.release(lost)
        flaky.down = False
        assert manager.held() == 1
        for _ in range(6):  # heartbeats, each ttl_s / 3 apart: 20 s in all
            now[0] += 10.0 / 3
            assert manager.renew() == 1  # the lease it holds, not the one it gave up
        assert [row.key for row in manager.rows("tool:busy")] == ["tool:busy"]
        assert manager.rows("tool:lost") == []
        assert other.try_acquire("tool:lost", 1) is not None  # the slot came back
    finally:
        manager.close()
        other.close()


# --- topology constraints on an NVLink domain that spans nodes (GB200 NVL72) ----------------------


def nvl72(nodes: int = 2, per_node: int = 4) -> Topology:
    """One rack whose nodes share one NVLink domain, as the inventory allows (a domain may span
    the nodes of one rack, not racks)."""
    lines = ["racks: [{name: r}]", "nodes:"]
    lines += [f"  - {{name: n{n}, rack: r}}" for n in range(nodes)]
    lines.append("gpus:")
    for n in range(nodes):
        for k in range(per_node):
            lines.append(f"  - {{id: n{n}g{k}, type: H100, memory_gb: 80, node: n{n}, nvlink_domain: nvl72}}")
    return from_inventory(parse_inventory("\n".join(lines) + "\n"))


def nodes_of(topology: Topology, gpus: tuple[str, ...]) -> set[str]:
    return {topology.gpus[topology.index[g]].node for g in gpus}


COMMUNICATION = WorkloadHint(bound="communication")


@pytest.mark.parametrize("required", [True, False])
def test_a_communication_bound_gang_that_must_stay_on_one_node_is_not_spread_over_an_nvlink_domain(
    required: bool,
) -> None:
    """A communication-bound gang tries the levels from ``nvlink_domain`` out to its constraint's,
    and took the first GPUs of a free-enough domain: with one NVLink domain over two nodes, a
    gang constrained to one ``node`` got 3 GPUs of one node and 1 of the other (a required
    constraint broken, or a preferred one given up before the locality wait)."""
    topology = nvl72()
    now = [0.0]
    broker = Broker(topology, [TenantQuota("a", nominal=8)], clock=lambda: now[0])
    broker.submit(GangRequest("one", "a", 1))  # n0g0: n0 has 3 free, n1 has 4
    events = broker.submit(
        GangRequest("x", "a", 4, hint=COMMUNICATION, topology=TopologyConstraint("node", required=required))
    )
    granted = [e.lease for e in events if isinstance(e, Granted)]
    assert len(granted) == 1
    assert nodes_of(topology, granted[0].gpus) == {"n1"}


def test_a_gang_that_must_stay_on_one_node_waits_rather_than_take_a_domain_spread_over_nodes() -> None:
    topology = nvl72()
    now = [0.0]
    broker = Broker(topology, [TenantQuota("a", nominal=8)], clock=lambda: now[0], locality_wait_s=60.0)
    for name in ("p", "q"):
        broker.submit(GangRequest(name, "a", 3, topology=TopologyConstraint("node"), ttl_s=86400.0))
    assert sorted(nodes_of(topology, lease.gpus).pop() for lease in broker.leases()) == ["n0", "n1"]
    required = GangRequest("x", "a", 2, hint=COMMUNICATION, topology=TopologyConstraint("node"))
    assert broker.submit(required) == []  # 2 GPUs free in the domain, one on each node: it waits
    now[0] += 1800.0  # past the locality wait: a required constraint is never loosened
    assert broker.advance() == []
    assert [q.request.id for q in broker.queue()] == ["x"]


def test_draining_for_a_gang_that_must_stay_on_one_node_reserves_one_node() -> None:
    """Draining reserved a group at the gang's innermost level, the NVLink domain, even when it
    spans nodes: the gang that must stay on one node was granted GPUs of both."""
    topology = nvl72()
    now = [0.0]
    broker = Broker(
        topology, [TenantQuota("a", nominal=16)], clock=lambda: now[0], max_draining=1, drain_after_s=0.0
    )
    broker.submit(GangRequest("a", "a", 2, topology=TopologyConstraint("node"), ttl_s=100.0))  # n0
    broker.submit(GangRequest("b", "a", 3, topology=TopologyConstraint("node"), ttl_s=86400.0))  # n1
    x = GangRequest("x", "a", 4, hint=COMMUNICATION, topology=TopologyConstraint("node"))
    assert broker.submit(x) == []  # 3 GPUs free, 2 on n0 and 1 on n1: it drains
    (queued,) = broker.queue()
    assert queued.draining and nodes_of(topology, queued.nominated) == {"n0"}
    now[0] = 100.0  # a expires: n0 is whole again
    granted = [e.lease for e in broker.advance() if isinstance(e, Granted)]
    assert [lease.id for lease in granted] == ["x"]
    assert nodes_of(topology, granted[0].gpus) == {"n0"}


# --- the journal keeps a draining reservation as one ------------------------------------------------


def test_a_draining_request_is_still_draining_after_a_restart_and_still_times_out(store: Store) -> None:
    """The journal did not keep ``draining``: a restored draining request became a nominated one,
    which never times out (its ``timeout_s`` was lost, the reserved GPUs could sit idle for good),
    and no longer counted against ``max_draining``."""
    topology = nvl72()
    now = [0.0]
    journal = BrokerLeaseStore(store)
    settings: dict[str, Any] = {"clock": lambda: now[0], "max_draining": 1, "drain_after_s": 0.0}
    quotas = [TenantQuota("a", nominal=16)]
    first = Broker(topology, quotas, journal=journal, **settings)
    first.submit(GangRequest("a", "a", 2, topology=TopologyConstraint("node"), ttl_s=86400.0))
    first.submit(GangRequest("b", "a", 3, topology=TopologyConstraint("node"), ttl_s=86400.0))
    first.submit(
        GangRequest("x", "a", 4, hint=COMMUNICATION, topology=TopologyConstraint("node"), timeout_s=600.0)
    )
    assert [q.draining for q in first.queue()] == [True]
    saved = journal.load()
    assert saved is not None and [q.draining for q in saved.queue] == [True]
    second = Broker(topology, quotas, journal=journal, **settings)
    second.restore(saved)
    assert second.queue() == first.queue()
    assert second.next_deadline() == 0.0  # the queue taken over is untried (review R90)
    assert second.advance() == [] and second.queue() == first.queue()
    assert second.next_deadline() == 600.0
    now[0] = 600.0
    assert [type(e).__name__ for e in second.advance()] == ["TimedOut"]
    assert second.free_gpus() == 3  # the reservation is given back


# --- quotas during a victim's checkpoint grace --------------------------------------------------------


def held_by(broker: Broker) -> dict[str, int]:
    """GPUs each tenant physically holds now (live leases, notified ones included)."""
    held: dict[str, int] = {}
    for lease in broker.leases():
        held[lease.tenant] = held.get(lease.tenant, 0) + len(lease.gpus)
    return held


def test_a_tenant_being_reclaimed_from_gets_no_new_gpus_beyond_its_quota_during_the_grace() -> None:
    """A notified lease stopped counting at its notice, so during its grace its tenant was
    granted new gangs as if it held nothing: research (at most 16 GPUs: its cohort's quota)
    held 20 GPUs for the whole grace, its cohort 20 plus prod's 8 reserved. A request that fits
    but for the GPUs still leaving now waits for them, and preempts nobody for them."""
    now = [0.0]
    quotas = [TenantQuota("research", nominal=8, cohort="lab"), TenantQuota("prod", nominal=8, cohort="lab")]
    broker = Broker(synthetic_topology(4, 8), quotas, clock=lambda: now[0], ttl_s=600.0, grace_s=120.0)
    broker.submit(GangRequest("r1", "research", 12))
    notices = broker.submit(GangRequest("p1", "prod", 8))  # reclaim: r1 is notified
    assert [type(e).__name__ for e in notices] == ["CheckpointNotice"]
    now[0] = 10.0
    assert broker.submit(GangRequest("r2", "research", 8)) == []  # waits for r1 to leave
    assert held_by(broker) == {"research": 12}
    for t in range(10, 131, 10):  # every call of the grace keeps research within its quota
        now[0] = float(t)
        assert not any(isinstance(e, CheckpointNotice) for e in broker.advance())
        assert held_by(broker).get("research", 0) <= 16
        assert sum(held_by(broker).values()) + sum(len(q.nominated) for q in broker.queue()) <= 16 + 12
    granted = {lease.id for lease in broker.leases()}
    assert granted == {"p1", "r2"}  # r1 ended at its deadline; p1 and r2 got their GPUs then
    assert held_by(broker) == {"prod": 8, "research": 8}


# --- the simulator's documented calibration figures ---------------------------------------------------


def test_the_documented_qwen3_prefix_cache_figures_are_what_the_model_gives() -> None:
    """docs/simulation.md said the model gives 0.60 s for a 10k-token prompt with 8,650 tokens
    cached; it gives 0.62 s (0.60 s takes 8,690 cached)."""
    assert QWEN3_32B.prefill_time(10_000) == pytest.approx(4.31, abs=0.005)
    assert QWEN3_32B.prefill_time(1_000, 9_000) == pytest.approx(0.46, abs=0.005)
    assert QWEN3_32B.prefill_time(1_350, 8_650) == pytest.approx(0.62, abs=0.005)
    assert QWEN3_32B.prefill_time(1_310, 8_690) == pytest.approx(0.60, abs=0.005)
    text = (REPO / "docs" / "simulation.md").read_text()
    assert "0.62 s with 8,650 cached" in " ".join(text.split())


def test_a_manager_cannot_release_the_lease_of_another_holder(store: Store) -> None:
    """``release`` deleted any row with the lease's id, whoever held it: a manager handed another
    process's ``Lease`` (two schedulers in one process mixing them up) freed a slot still in use,
    and a third caller could take it while the holder ran (the shared limit exceeded)."""
    ours = LeaseManager(store, ttl_s=10.0)
    theirs = LeaseManager(store, ttl_s=10.0)
    try:
        lease = theirs.try_acquire("tool:x", 1)
        assert lease is not None
        with pytest.raises(InputError, match="held by"):
            ours.release(lease)
        assert [row.holder for row in ours.rows("tool:x")] == [theirs.holder]
        assert ours.try_acquire("tool:x", 1) is None
        theirs.release(lease)
        assert ours.rows("tool:x") == []
    finally:
        ours.close()
        theirs.close()


# --- a gated lease never outlives the grant that decided it -------------------------------------------


@pytest.mark.parametrize("ttl_s", [2 * 3600.0, 1e300])
def test_a_gated_lease_that_would_outlive_its_grant_is_refused_before_any_decision(
    tmp_path: Path, ttl_s: float
) -> None:
    """A lease's time to live was any number: on a GPU type the policy does not price, a
    ``ttl_s`` of 1e300 was allowed and granted, so the lease never expired: a holder that died
    never gave its GPUs back, and a grant that expired or was revoked kept them for good (its
    renewals are what check the authority, and it never needed one)."""
    setup = GatedSetup(tmp_path)  # grants live 3600 s
    try:
        trainer = setup.ids["trainer"]
        with pytest.raises(BrokerError, match="outlive"):
            setup.gated.submit(trainer, GangRequest("long", "x", 1, gpu_type="H100", ttl_s=ttl_s))
        assert setup.entries() == [] and setup.broker.leases() == [] and setup.broker.queue() == []
        answer = setup.gated.submit(trainer, GangRequest("short", "x", 1, gpu_type="H100", ttl_s=600.0))
        assert answer.allowed and answer.lease() is not None
    finally:
        setup.gate.close()


def test_a_renewal_that_would_carry_a_lease_past_its_grant_is_refused(tmp_path: Path) -> None:
    setup = GatedSetup(tmp_path)
    try:
        trainer = setup.ids["trainer"]
        lease = setup.gated.submit(trainer, GangRequest("r", "x", 1, gpu_type="H100", ttl_s=600.0)).lease()
        assert lease is not None
        assert setup.gated.renew(trainer, "r").expires_at == setup.clock.now + 600.0
        # the grant expires in under 600 s: a renewal to 600 s from now would outlive it
        late = dataclasses.replace(trainer, chain=dataclasses.replace(trainer.chain))
        object.__setattr__(late.chain, "expires", int(time.time()) + 300)
        with pytest.raises(Denied, match="outlive"):
            setup.gated.renew(late, "r")
        assert [lease.expires_at for lease in setup.broker.leases()] == [setup.clock.now + 600.0]
    finally:
        setup.gate.close()


# --- hostile inventories ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("  - {id: a, type: H100, memory_gb: true, node: n}", "gpus.0.memory_gb"),
        ('  - {id: a, type: H100, memory_gb: "80", node: n}', "gpus.0.memory_gb"),
        (
            "  - {id: a, type: H100, memory_gb: 80, node: n}\nbackends:\n"
            "  - {name: b, url: 'http://h:1', models: [m], max_concurrency: true}",
            "backends.0.max_concurrency",
        ),
        (
            "  - {id: a, type: H100, memory_gb: 80, node: n}\nbackends:\n"
            "  - {name: b, url: 'http://h:1', models: [m], kv_capacity_tokens: '5'}",
            "backends.0.kv_capacity_tokens",
        ),
    ],
)
def test_an_inventory_number_that_is_a_boolean_or_text_is_a_located_error(line: str, field: str) -> None:
    """Numbers were read laxly: ``memory_gb: true`` loaded as a 1 GB GPU (a memory filter then
    never matched it) and ``max_concurrency: true`` as a backend capped at one request; "80" in
    quotes as 80. Each is now an ``InventoryError`` naming the file, the line, the column and the field."""
    text = f"nodes: [{{name: n}}]\ngpus:\n{line}\n"
    with pytest.raises(
        InventoryError, match=rf"^inv\.yaml:\d+:\d+: {re.escape(field)}: Input should be a valid"
    ):
        parse_inventory(text, source="inv.yaml", read_keys=False)


# --- two broker processes under one name ---------------------------------------------------------------


def test_a_second_broker_under_one_name_cannot_overwrite_the_first_and_a_restart_takes_over(
    store: Store,
) -> None:
    """Nothing stopped two broker processes under one name: a second one (started by mistake, or
    a restarted one whose predecessor still ran) wrote its state over the first's, so both granted
    the same GPUs and the journal lost the first's leases, whose holders still used them. Now the
    journal has one writer: a broker that did not restore the name's state cannot write it, and
    the one a restart took over from fails closed (``StoreError``) instead of granting on."""
    now = [0.0]
    topology = synthetic_topology(1, 8)
    quotas = [TenantQuota("a", nominal=8)]
    opened: list[Store] = []

    def process() -> tuple[Broker, BrokerLeaseStore]:
        opened.append(open_store(store.url))  # each "process" on its own connection
        journal = BrokerLeaseStore(opened[-1])
        return Broker(topology, quotas, clock=lambda: now[0], ttl_s=600.0, journal=journal), journal

    try:
        first, journal = process()
        first.submit(GangRequest("held", "a", 8))
        stray, _ = process()  # never restored the name's state
        with pytest.raises(StoreError, match="another broker process"):
            stray.submit(GangRequest("stray", "a", 8))
        saved = journal.load()
        assert saved is not None and [lease.id for lease in saved.leases] == ["held"]
        restarted, restarted_journal = process()
        restarted.restore(saved)
        restarted.advance()  # writes: the name is now the restarted broker's
        with pytest.raises(StoreError, match="another broker process"):
            first.release("held")
        after = journal.load()
        assert after is not None and [lease.id for lease in after.leases] == ["held"]
        restarted.release("held")
        assert restarted_journal.load() == restarted.snapshot()
    finally:
        for opened_store in opened:
            opened_store.close()


# --- malformed requests --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: GangRequest("x", "a", 2, hint={"bound": "communication"}),  # type: ignore[arg-type]
        lambda: GangRequest("x", "a", 2, topology=TopologyConstraint("galaxy")),  # type: ignore[arg-type]
        lambda: GangRequest("x", "a", 2, topology=TopologyConstraint("node", required="no")),  # type: ignore[arg-type]
        lambda: GangRequest("x", "a", 2, hint=WorkloadHint(bound="bogus")),  # type: ignore[arg-type]
        lambda: GangRequest("x", "a", 2, gpu_type=5),  # type: ignore[arg-type]
        lambda: GangRequest("x", "a", 2, min_memory_gb=True),
    ],
)
def test_a_request_the_broker_could_not_place_is_refused_when_made_and_never_poisons_the_queue(
    make: Any,
) -> None:
    """A request with a hint that was no ``WorkloadHint`` passed ``submit``'s checks, was queued,
    and then raised ``AttributeError`` in placement: it stayed in the queue, so every later call
    of every caller (submit, renew, release, advance) raised the same traceback. A level that is
    none of the three raised ``KeyError`` from ``submit``; ``required="no"`` was read as required;
    an unknown bound was silently ``compute``. Each is now a ``BrokerError`` when the request is
    made, and the broker never sees it."""
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)])
    with pytest.raises(BrokerError):
        make()
    assert [type(e).__name__ for e in broker.submit(GangRequest("ok", "a", 2))] == ["Granted"]


# --- the replay ends ----------------------------------------------------------------------------------


class SendAll:
    """The simplest replay dispatcher: every request to backend ``b``; counts what is in flight."""

    def __init__(self) -> None:
        self.in_flight = 0

    def route(self, request: TraceRequest, now: float) -> Send:
        self.in_flight += 1
        return Send("b")

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None:
        pass

    def finished(self, backend: str, request: TraceRequest, now: float) -> None:
        self.in_flight -= 1

    def observe(self, backend: str, metrics: dict[str, float], now: float) -> None:
        pass


def test_a_request_larger_than_the_kv_cache_is_rejected_by_the_replay_instead_of_hanging_it() -> None:
    """A request whose prompt and output need more KV than the engine has could never be
    admitted: it blocked the FCFS queue, the engine stepped empty batches for ever, and ``replay``
    never returned (the request behind it was never served). The engine now refuses it when it is
    added, and the replay records it as rejected, as vLLM answers a request past max_model_len."""
    engines = {"b": Engine(LLAMA_8B_H100, EngineConfig(kv_capacity_tokens=1_000))}
    dispatcher = SendAll()
    requests = [
        TraceRequest("too-big", 0.0, 990, 12),  # 1,001 tokens of KV
        TraceRequest("fits", 0.5, 990, 11),  # exactly 1,000: the last token needs none
    ]
    big, fits = replay(requests, engines, dispatcher)
    assert big.rejected is not None and "1001 tokens of KV" in big.rejected and big.finished_at is None
    assert fits.rejected is None and fits.finished_at is not None
    assert dispatcher.in_flight == 0
    with pytest.raises(InputError, match="prompt of -1 tokens"):
        Engine(LLAMA_8B_H100).add(SimRequest("negative", -1, 5))
