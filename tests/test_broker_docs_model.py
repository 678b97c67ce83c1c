"""The GPU broker against its own documentation (docs/broker.md).

Each promise checked here runs the real broker, its real journal (SQLite files, and the session's
PostgreSQL server through the ``store`` fixture), the real Gate and audit log, and the real CLI.

What holds:

- Quotas, priorities and topology under random load (two seeds, every tenant kind: a cohort
  with and without a borrowing limit, a tenant with no cohort, graces of 0): no tenant ever
  holds more GPUs than ``nominal + borrowing_limit`` (or its cohort's nominal sum), no cohort more
  than the sum of its members' nominal quotas, notified leases counted, so also during a
  victim's grace; no lease is granted after its request's ``timeout_s``; a gang with a required
  constraint always lands inside one group of that level; a ``priority`` notice only goes to a
  lower-priority lease of the preemptor's own tenant, a ``reclaim`` notice only to another tenant
  of its cohort; no GPU is in two leases.
- A broker restarted from its journal (SQLite and PostgreSQL), many times in a random run, goes
  on exactly as one that never stopped: the same leases, queue, per-tenant usage, free GPUs and
  next deadline right after ``restore``, and the same events for every later call.
- Two brokers started on one name at once, each on its own connection (threads, SQLite and
  PostgreSQL), never both hand out GPUs: exactly one journals its grant, the other raises
  ``StoreError`` and returns no event.

What did not hold, fixed here:

- ``GatedBroker.renew`` audited none of the events its own broker call caused: a lease whose
  expiry fell while the renewal was decided ended in the journal, but its ``lease_expired``
  outcome waited for some later call; a restart before it lost the outcome, and ``reconcile``
  then ended the lease as ``lease_lost`` and returned its reservation whole, its holder never
  charged for the time it had held the GPUs (docs/broker.md: each event of a call through the
  ``GatedBroker`` is audited; the end of a lease settles the time held).
- A renewal whose lease ended while it was decided left an ``allow`` in the log that nothing
  settled (its reservation was returned with no entry); it is now closed by an ``error`` outcome
  that refers to it, in the transaction that returns the reservation.
- Renewing a request that still waits in the queue was decided and audited as an ``allow`` of a
  renewal that could never happen; it is now ``LeaseLost`` before any decision.
- ``agentgate broker inventory --json`` printed no snapshot time (docs: each command prints the
  time of the snapshot it read), told a reservation from a lease only by a text
  ``"(reserved: ID)"`` in the ``lease`` field, and with the wrong inventory file called every GPU
  free while the broker's state held GPUs the file does not list.

Fixed in the fix round (was a strict xfail; a generation number in ``broker_state``):

- ``agentgate/store/broker_leases.py``: taking a name over is not tied to the state that was
  loaded. A broker restored from a snapshot that its predecessor wrote over since (the old
  process still ran between the new one's ``load`` and its first write, or two replicas restored
  at once) takes the name over all the same: both journal a grant of the same GPUs and both
  callers were told ``Granted``. The claiming save now takes the name only while the stored
  generation is the one loaded.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_broker_restart_budget import World, lease

from agentgate.cli.main import main
from agentgate.dispatch.broker import (
    Broker,
    BrokerEvent,
    CheckpointNotice,
    GangRequest,
    Granted,
    TenantQuota,
    TopologyConstraint,
    WorkloadHint,
    from_inventory,
    synthetic_topology,
)
from agentgate.dispatch.broker._topology import LEVELS
from agentgate.dispatch.inventory import load_inventory
from agentgate.errors import BrokerError, LeaseLost, StoreError
from agentgate.store import Store, open_store
from agentgate.store.broker_leases import BrokerLeaseStore

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- quotas, priorities and topology under random load -------------------------------------------


def _random_request(rng: random.Random, step: int, tenants: str) -> GangRequest:
    return GangRequest(
        f"r{step}",
        rng.choice(tenants),
        rng.randint(1, 8),
        rng.randint(0, 2),
        WorkloadHint(
            bound=rng.choice(["compute", "memory", "communication"]),
            kind=rng.choice(["training", "inference"]),
        ),
        rng.choice(
            [
                None,
                TopologyConstraint("nvlink_domain"),
                TopologyConstraint("node"),
                TopologyConstraint("node", required=False),
            ]
        ),
        timeout_s=rng.choice([5, 40, 200]),
        grace_s=rng.choice([None, 0.0, 30.0]),
    )


@pytest.mark.parametrize("seed", [3, 11])
def test_no_tenant_or_cohort_ever_holds_more_than_its_quota_and_notices_follow_the_rules(seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    quotas = [
        TenantQuota("a", 12, borrowing_limit=4, cohort="c"),
        TenantQuota("b", 12, cohort="c"),
        TenantQuota("d", 8, cohort="c"),
        TenantQuota("e", 8),  # no cohort: never borrows, never lends
    ]
    by_tenant = {q.tenant: q for q in quotas}
    ceiling = {"a": 16, "b": 32, "d": 32, "e": 8}
    broker = Broker(
        synthetic_topology(4, 8, domains_per_node=2, nodes_per_rack=2),
        quotas,
        clock=clock,
        ttl_s=50.0,
        grace_s=10.0,
        locality_wait_s=20.0,
        drain_after_s=5.0,
        max_draining=2,
    )
    requests: dict[str, tuple[GangRequest, float]] = {}
    leases: dict[str, Any] = {}  # every lease ever granted, as granted
    for step in range(1500):
        clock.now += rng.random() * 3
        live = sorted({x.id for x in broker.leases()} | {q.request.id for q in broker.queue()})
        op = rng.random()
        events: list[BrokerEvent]
        if op < 0.5:
            request = _random_request(rng, step, "abde")
            try:
                events = broker.submit(request)
                requests[request.id] = (request, clock.now)
            except BrokerError:
                events = broker.advance()
        elif op < 0.75 and live:
            try:
                events = broker.release(rng.choice(live))
            except LeaseLost:  # it ended as the clock moved on
                events = broker.advance()
        elif op < 0.9 and live:
            with contextlib.suppress(LeaseLost):
                broker.renew(rng.choice(live))
            events = broker.advance()
        else:
            events = broker.advance()
        for event in events:
            if isinstance(event, Granted):
                granted = event.lease
                request, submitted = requests[granted.id]
                leases[granted.id] = granted
                assert granted.granted_at <= submitted + request.timeout_s
                if request.topology is not None and request.topology.required:
                    assert granted.level is not None
                    assert LEVELS.index(granted.level) <= LEVELS.index(request.topology.level)
            elif isinstance(event, CheckpointNotice):
                victim, preemptor = leases[event.lease.id], requests[event.preemptor][0]
                if event.reason == "priority":
                    assert victim.tenant == preemptor.tenant and victim.priority < preemptor.priority
                else:
                    assert victim.tenant != preemptor.tenant
                    assert by_tenant[victim.tenant].cohort == by_tenant[preemptor.tenant].cohort == "c"
        held: dict[str, int] = {}
        gpus: list[str] = []
        for x in broker.leases():  # notified leases included: they still hold their GPUs
            held[x.tenant] = held.get(x.tenant, 0) + len(x.gpus)
            gpus.extend(x.gpus)
        assert len(gpus) == len(set(gpus))
        assert all(n <= ceiling[t] for t, n in held.items()), (step, held)
        assert sum(n for t, n in held.items() if t != "e") <= 32, (step, held)


# --- a restart changes nothing -------------------------------------------------------------------


def test_a_broker_restarted_from_its_journal_goes_on_as_one_that_never_stopped(store: Store) -> None:
    """A twin broker without a journal takes the same calls; the journaled one is closed and
    restored from the store now and then (between calls, each of which journaled its state)."""
    rng = random.Random(5)
    clock = Clock()
    topology = synthetic_topology(4, 8, domains_per_node=2, nodes_per_rack=2)
    quotas = [
        TenantQuota("a", 12, cohort="c"),
        TenantQuota("b", 12, borrowing_limit=6, cohort="c"),
        TenantQuota("e", 8),
    ]
    settings: dict[str, Any] = dict(
        clock=clock, ttl_s=50.0, grace_s=10.0, locality_wait_s=20.0, drain_after_s=5.0, max_draining=2
    )
    twin = Broker(topology, quotas, **settings)
    opened = open_store(store.url)
    real = Broker(topology, quotas, journal=BrokerLeaseStore(opened), **settings)
    restarts = 0
    answered = [True]  # whether the last call returned (a call that raised journaled nothing)

    def both(call: Callable[[Broker], list[BrokerEvent]]) -> None:
        answers = []
        for broker in (twin, real):
            try:
                answers.append(sorted(map(repr, call(broker))))
            except (BrokerError, LeaseLost) as exc:
                answers.append([repr(exc)])
        assert answers[0] == answers[1], (step, answers)
        answered[0] = not answers[0] or not answers[0][0].startswith(("BrokerError", "LeaseLost"))

    try:
        for step in range(300):
            clock.now += rng.random() * 3
            saved_once = BrokerLeaseStore(opened).load() is not None
            if saved_once and answered[0] and rng.random() < 0.08:
                opened.close()
                opened = open_store(store.url)
                journal = BrokerLeaseStore(opened)
                real = Broker(topology, quotas, journal=journal, **settings)
                saved = journal.load()
                assert saved is not None
                real.restore(saved)
                restarts += 1
                assert real.snapshot() == twin.snapshot()
                # The queue taken over is untried (review R90): now while a request waits.
                assert real.next_deadline() == (clock.now if twin.queue() else twin.next_deadline())
                assert real.free_gpus() == twin.free_gpus()
                assert [real.usage(t) for t in "abe"] == [twin.usage(t) for t in "abe"]
            live = sorted({x.id for x in twin.leases()} | {q.request.id for q in twin.queue()})
            op = rng.random()
            if op < 0.5:
                request = _random_request(rng, step, "abe")
                both(lambda b, r=request: b.submit(r))  # type: ignore[misc]
            elif op < 0.75 and live:
                chosen = rng.choice(live)
                both(lambda b, x=chosen: b.release(x))  # type: ignore[misc]
            elif op < 0.9 and live:
                # renew() returns the lease; the events its clock caused come from the next call
                chosen = rng.choice(live)
                both(lambda b, x=chosen: [b.renew(x), *b.advance()])  # type: ignore[misc]
            else:
                both(lambda b: b.advance())
    finally:
        opened.close()
    assert restarts >= 12


# --- two brokers on one name --------------------------------------------------------------------


def test_two_brokers_started_at_once_on_one_name_never_both_grant(store: Store) -> None:
    topology = synthetic_topology(1, 8)
    quotas = [TenantQuota("a", 8)]
    results: dict[int, Any] = {}
    start = threading.Barrier(4)
    stores = [open_store(store.url) for _ in range(4)]

    def process(n: int) -> None:
        broker = Broker(topology, quotas, clock=Clock(), journal=BrokerLeaseStore(stores[n]))
        start.wait()
        try:
            results[n] = broker.submit(GangRequest(f"job{n}", "a", 8))
        except StoreError as exc:
            results[n] = exc

    threads = [threading.Thread(target=process, args=(n,)) for n in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        granted = [r for r in results.values() if isinstance(r, list)]
        refused = [r for r in results.values() if isinstance(r, StoreError)]
        assert len(granted) == 1 and len(refused) == 3
        (event,) = granted[0]
        assert isinstance(event, Granted)
        saved = BrokerLeaseStore(stores[0]).load()
        assert saved is not None and [x.id for x in saved.leases] == [event.lease.id]
    finally:
        for opened in stores:
            opened.close()


def test_a_broker_restored_from_state_written_over_since_cannot_take_the_name_over(store: Store) -> None:
    clock = Clock(100.0)
    topology = synthetic_topology(2, 8)
    quotas = [TenantQuota("a", 16)]
    node = TopologyConstraint("node")
    old_store, new_store = open_store(store.url), open_store(store.url)
    try:
        old = Broker(topology, quotas, clock=clock, ttl_s=600, journal=BrokerLeaseStore(old_store))
        old.submit(GangRequest("first", "a", 8, topology=node))
        journal = BrokerLeaseStore(new_store)
        saved = journal.load()  # a restart begins: the new process reads the state...
        assert saved is not None
        clock.now = 101.0
        (second,) = old.submit(GangRequest("second", "a", 8, topology=node))  # ...the old one still grants
        assert isinstance(second, Granted)
        new = Broker(topology, quotas, clock=clock, ttl_s=600, journal=journal)
        new.restore(saved)
        clock.now = 102.0
        try:
            third = new.submit(GangRequest("third", "a", 8, topology=node))
        except StoreError:
            third = []  # refused: it must load the state again
        handed = [g for e in third if isinstance(e, Granted) for g in e.lease.gpus]
        assert not set(handed) & set(second.lease.gpus), "the same GPUs granted twice, both journaled"
    finally:
        old_store.close()
        new_store.close()


# --- GatedBroker.renew: every event of the call is evidence ------------------------------------


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    made = World(store.url)
    yield made
    made.process.gate.close()


def _slow_decisions(world: World, monkeypatch: pytest.MonkeyPatch, until: float) -> None:
    """Each Gate decision of the running process takes until ``until`` on the broker's clock (a
    slow store): the clock the broker reads after the decision is past it."""
    gate = world.process.gate
    decide = gate.authorize

    def slow(*args: Any, **kwargs: Any) -> Any:
        answer = decide(*args, **kwargs)
        world.clock.now = max(world.clock.now, until)
        return answer

    monkeypatch.setattr(gate, "authorize", slow)


def test_a_lease_that_expires_while_another_is_renewed_is_settled_and_survives_a_restart(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b (2 GPUs, ttl 60 s) expires at 1090 while a's renewal is decided (1089 to 1095): b held
    its GPUs 60 s, 120,000 micro-dollars at the test policy's price."""
    p = world.process
    p.gated.submit(world.trainer, lease("a", 2))  # t=1000, expires 1060
    world.clock.now = 1030.0
    b = p.gated.submit(world.trainer, lease("b", 2))  # expires 1090
    world.clock.now = 1055.0
    p.gated.renew(world.trainer, "a")  # a: 1115
    world.clock.now = 1089.0
    _slow_decisions(world, monkeypatch, until=1095.0)
    p.gated.renew(world.trainer, "a")
    assert [x.id for x in p.broker.leases()] == ["a"]
    ended = [e for e in p.entries() if e.ref == b.authorization.audit_index and e.status != "lease_granted"]
    assert [(e.status, e.budget_delta) for e in ended] == [("lease_expired", 120_000)]
    monkeypatch.undo()
    restarted = world.restart()
    assert restarted.gated.reconcile() == []  # nothing of b's is left to be lost
    assert world.spent() == 120_000


def test_a_renewal_whose_lease_ends_while_it_is_decided_is_closed_in_the_log(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = world.process
    granted = p.gated.submit(world.trainer, lease("a", 2))  # t=1000, expires 1060, 120,000 reserved
    world.clock.now = 1059.0
    _slow_decisions(world, monkeypatch, until=1061.0)
    with pytest.raises(LeaseLost):
        p.gated.renew(world.trainer, "a")
    entries = p.entries()
    (renewal,) = [e for e in entries if e.kind == "allow" and e.index != granted.authorization.audit_index]
    closing = [(e.status, e.budget_delta) for e in entries if e.ref == renewal.index]
    assert closing == [("error", 0)]  # the renewal's allow is settled, its reservation returned
    ends = [e.status for e in entries if e.ref == granted.authorization.audit_index]
    assert ends == ["lease_granted", "lease_expired"]  # and the lease's own end is audited now
    assert world.spent() == 120_000 and world.remaining() == world.budget - 120_000


def test_renewing_a_request_that_still_waits_decides_nothing(world: World) -> None:
    p = world.process
    p.gated.submit(world.trainer, lease("big", 8))
    p.gated.submit(world.trainer, lease("waits", 2))
    before = len(p.entries())
    with pytest.raises(LeaseLost, match="not granted yet"):
        p.gated.renew(world.trainer, "waits")
    assert len(p.entries()) == before  # no allow of a renewal that cannot happen
    assert [q.request.id for q in p.broker.queue()] == ["waits"]


# --- the CLI ------------------------------------------------------------------------------------


def test_inventory_json_gives_the_snapshot_time_and_tells_a_reservation_from_a_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The inventory's 8 GPUs, two NVLink domains of 4: r (nominal 4) borrows 2 with r3, and p
    reclaims them: p1 is nominated on r3's 2 GPUs and the 2 free ones beside them."""
    db = tmp_path / "agentgate.db"
    inventory = ROOT / "policies" / "inventory.yaml"
    topology = from_inventory(load_inventory(inventory, read_keys=False))
    clock = Clock(1_700_000_000.0)
    with open_store(str(db)) as opened:
        broker = Broker(
            topology,
            [TenantQuota("r", 4, cohort="lab"), TenantQuota("p", 4, cohort="lab")],
            clock=clock,
            journal=BrokerLeaseStore(opened),
        )
        broker.submit(GangRequest("r1", "r", 4))
        clock.now += 1
        broker.submit(GangRequest("r3", "r", 2))
        clock.now += 1
        (notice,) = broker.submit(GangRequest("p1", "p", 4))
        assert isinstance(notice, CheckpointNotice) and notice.lease.id == "r3"
    assert main(["broker", "inventory", "--inventory", str(inventory), "--store", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["taken_at"] == 1_700_000_002.0 and out["unknown_gpus"] == []
    gpus = {g["id"]: (g["lease"], g["reserved_for"]) for g in out["gpus"]}
    assert gpus == {
        **{f"node-a/{i}": ("r1", None) for i in range(4)},
        "node-b/0": ("r3", "p1"),  # the victim's until it ends, promised to p1
        "node-b/1": ("r3", "p1"),
        "node-b/2": (None, "p1"),  # free, but reserved: not a lease
        "node-b/3": (None, "p1"),
    }

    other = tmp_path / "other.yaml"  # the wrong file: none of the broker's GPUs is in it
    other.write_text("nodes: [{name: x}]\ngpus:\n  - {id: x/0, type: H100, memory_gb: 80, node: x}\n")
    assert main(["broker", "inventory", "--inventory", str(other), "--store", str(db)]) == 0
    text = capsys.readouterr().out
    assert "1 GPUs, 1 free" in text
    assert "8 GPUs held in the broker's state are not in" in text
