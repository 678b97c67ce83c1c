"""The broker's journal in the store (agentgate/store/broker_leases.py, SQLite and PostgreSQL), the
topology adapter, and the CLI. A saved state reads back whole; a restarted broker takes its name over
only while the stored state is still the one it loaded (by generation, and at generation 0 by
content); brokers sharing a store read and write only their own name's rows."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_store_leases import _Hooked, _pg

from agentgate.cli import broker as broker_cli
from agentgate.dispatch.broker import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    Broker,
    GangRequest,
    LeaseEnded,
    TenantQuota,
    TopologyConstraint,
    WorkloadHint,
    from_inventory,
    synthetic_topology,
)
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import BrokerError, InputError, InventoryError, StoreError
from agentgate.store import SQLiteStore, Store
from agentgate.store.broker_leases import BrokerLeaseStore

INVENTORY = """
racks: [{name: rack-1}]
nodes:
  - {name: node-a, rack: rack-1}
  - {name: node-b}
gpus:
  - {id: a0, type: H100, memory_gb: 80, node: node-a, nvlink_domain: nvl-a}
  - {id: a1, type: H100, memory_gb: 80, node: node-a, nvlink_domain: nvl-a}
  - {id: b0, type: H200, memory_gb: 141, node: node-b}
"""


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def empty_broker(journal: BrokerLeaseStore, clock: FakeClock) -> Broker:
    quotas = [TenantQuota("a", 16, cohort="lab"), TenantQuota("b", 16, cohort="lab")]
    return Broker(synthetic_topology(2, 8), quotas, clock=clock, ttl_s=60, grace_s=30, journal=journal)


def busy_broker(journal: BrokerLeaseStore, clock: FakeClock) -> Broker:
    """A broker with an active lease, a notified one, a nominated preemptor and a plain waiter."""
    broker = empty_broker(journal, clock)
    broker.submit(GangRequest("low", "a", 8, holder="trainer-1", hint=WorkloadHint("communication")))
    broker.submit(GangRequest("keep", "b", 6, topology=TopologyConstraint("node", required=False)))
    clock.now += 5
    broker.submit(GangRequest("high", "a", 8, priority=3))
    broker.submit(GangRequest("wait", "b", 4, timeout_s=100, hint=WorkloadHint("memory", "inference")))
    return broker


def test_saved_state_reads_back_equal(store: Store) -> None:
    clock = FakeClock()
    journal = BrokerLeaseStore(store)
    broker = busy_broker(journal, clock)
    loaded = journal.load()
    assert loaded is not None
    expected = broker.snapshot()
    assert loaded.leases == expected.leases
    assert loaded.queue == expected.queue
    assert loaded.taken_at == clock.now
    assert {lease.id: lease.state for lease in loaded.leases} == {"low": "notified", "keep": "active"}
    assert [q.request.id for q in loaded.queue] == ["high", "wait"]


def test_the_extreme_priorities_are_journaled_and_read_back(store: Store) -> None:
    # A request's priority is a 32-bit integer (GangRequest): what the journal's column holds on
    # both stores. Priority 2**63 used to be granted and then fail every write (OverflowError).
    clock = FakeClock()
    journal = BrokerLeaseStore(store)
    broker = empty_broker(journal, clock)
    broker.submit(GangRequest("low", "a", 1, priority=MIN_PRIORITY))
    broker.submit(GangRequest("high", "b", 1, priority=MAX_PRIORITY))
    loaded = journal.load()
    assert loaded is not None and loaded.leases == broker.snapshot().leases
    assert {lease.priority for lease in loaded.leases} == {MIN_PRIORITY, MAX_PRIORITY}


def test_save_replaces_the_previous_state(store: Store) -> None:
    clock = FakeClock()
    journal = BrokerLeaseStore(store)
    broker = busy_broker(journal, clock)
    broker.release("low")  # checkpoint done: high gets the GPUs
    loaded = journal.load()
    assert loaded is not None
    assert sorted(lease.id for lease in loaded.leases) == ["high", "keep"]
    assert [q.request.id for q in loaded.queue] == ["wait"]


def test_brokers_sharing_a_store_keep_their_own_state(store: Store) -> None:
    clock = FakeClock()
    busy_broker(BrokerLeaseStore(store, "east"), clock)
    other = BrokerLeaseStore(store, "west")
    assert other.load() is None
    Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock, journal=other).submit(
        GangRequest("solo", "a", 1)
    )
    west = other.load()
    east = BrokerLeaseStore(store, "east").load()
    assert west is not None and east is not None
    assert [lease.id for lease in west.leases] == ["solo"]
    assert "solo" not in {lease.id for lease in east.leases}


def test_restarted_broker_takes_over_the_saved_state(store: Store) -> None:
    clock = FakeClock()
    before = busy_broker(BrokerLeaseStore(store), clock)
    journal = BrokerLeaseStore(store)
    saved = journal.load()
    assert saved is not None
    after = empty_broker(journal, clock)
    after.restore(saved)
    assert after.leases() == before.leases() and after.queue() == before.queue()
    assert after.free_gpus() == before.free_gpus() == 0
    assert (after.usage("a"), after.usage("b")) == (before.usage("a"), before.usage("b"))
    clock.now += 30  # low's grace ends: the preemptor gets its GPUs from the new broker
    events = after.advance()
    assert [(type(e).__name__, getattr(e, "reason", "")) for e in events][:2] == [
        ("LeaseEnded", "preempted"),
        ("Granted", ""),
    ]


def test_holder_that_died_during_a_broker_restart_still_expires(store: Store) -> None:
    clock = FakeClock()
    busy_broker(BrokerLeaseStore(store), clock)
    saved = BrokerLeaseStore(store).load()
    assert saved is not None
    after = empty_broker(BrokerLeaseStore(store), clock)
    after.restore(saved)
    clock.now += 60  # nobody renewed "keep"
    ended = {e.lease.id: e.reason for e in after.advance() if isinstance(e, LeaseEnded)}
    assert ended["keep"] == "expired"


def test_restore_refuses_a_snapshot_of_another_cluster_and_changes_nothing(sqlite_store: Store) -> None:
    clock = FakeClock()
    busy_broker(BrokerLeaseStore(sqlite_store), clock)
    saved = BrokerLeaseStore(sqlite_store).load()
    assert saved is not None
    small = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8), TenantQuota("b", 8)], clock=clock)
    with pytest.raises(BrokerError, match="unknown gpu"):
        small.restore(saved)
    assert small.leases() == [] and small.queue() == [] and small.free_gpus() == 8
    busy = busy_broker(BrokerLeaseStore(sqlite_store, "other"), clock)
    with pytest.raises(BrokerError, match="done nothing yet"):
        busy.restore(saved)


def test_from_inventory_maps_domains_nodes_and_racks() -> None:
    topology = from_inventory(parse_inventory(INVENTORY))
    assert [(g.id, g.nvlink_domain, g.node, g.rack) for g in topology.gpus] == [
        ("a0", "nvl-a", "node-a", "rack-1"),
        ("a1", "nvl-a", "node-a", "rack-1"),
        ("b0", "gpu:b0", "node-b", "node:node-b"),
    ]
    assert topology.shared_level([0, 1]) == "nvlink_domain"
    assert topology.shared_level([0, 2]) is None


def test_empty_inventory_is_refused() -> None:
    with pytest.raises(InventoryError, match="at least one GPU"):
        from_inventory(parse_inventory("gpus: []"))


# --- CLI ---------------------------------------------------------------------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="agentgate")
    broker_cli.register(parser.add_subparsers(dest="group"))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def cli_store(tmp_path: Path) -> str:
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        busy_broker(BrokerLeaseStore(store), FakeClock())
    return str(path)


def test_cli_shows_leases_and_queue(cli_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["broker", "leases", "--store", cli_store]) == 0
    out = capsys.readouterr().out
    assert "state as of 2023-11-14T22:13:25Z" in out
    low = next(line for line in out.splitlines() if line.startswith("low "))
    assert "notified" in low and "high" in low and "nvlink_domain" in low
    assert run_cli(["broker", "queue", "--store", cli_store, "--json"]) == 0
    queue = json.loads(capsys.readouterr().out)["queue"]
    assert [(q["id"], q["victims"], q["deadline"]) for q in queue] == [
        ("high", ["low"], 1_700_003_605.0),  # nominated, and still bounded by its timeout_s
        ("wait", [], 1_700_000_105.0),
    ]


def test_cli_shows_inventory_with_holders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    store_path = tmp_path / "agentgate.db"
    with SQLiteStore(store_path) as store:
        topology = from_inventory(parse_inventory(INVENTORY))
        broker = Broker(topology, [TenantQuota("a", 3)], journal=BrokerLeaseStore(store))
        broker.submit(GangRequest("pair", "a", 2, hint=WorkloadHint("communication")))
    assert (
        run_cli(["broker", "inventory", "--inventory", str(path), "--store", str(store_path), "--json"]) == 0
    )
    gpus = {g["id"]: g["lease"] for g in json.loads(capsys.readouterr().out)["gpus"]}
    assert gpus == {"a0": "pair", "a1": "pair", "b0": None}
    assert run_cli(["broker", "inventory", "--inventory", str(path), "--store", str(store_path)]) == 0
    assert "3 GPUs, 1 free" in capsys.readouterr().out


def test_cli_with_no_state_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    SQLiteStore(tmp_path / "empty.db").close()
    assert run_cli(["broker", "leases", "--store", str(tmp_path / "empty.db")]) == 0
    assert "no state written yet" in capsys.readouterr().out


def test_cli_refuses_a_store_that_does_not_exist(tmp_path: Path) -> None:
    """A mistyped --store is an error naming the path, not a new empty store read as 'no state'."""
    for verb in ("leases", "queue"):
        with pytest.raises(InputError, match="no store at"):
            run_cli(["broker", verb, "--store", str(tmp_path / "typo.db")])
    assert not (tmp_path / "typo.db").exists()


def test_cli_bad_inventory_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("gpus:\n  - {id: a0, type: H100, memory_gb: 80, node: nowhere}\n")
    # The CLI turns the InventoryError into an InputError whose one line is escaped (printable).
    with pytest.raises(
        InputError, match=r"inv\.yaml:2:\d+: gpus\.0\.node: gpu 'a0': unknown node 'nowhere'$"
    ):
        run_cli(["broker", "inventory", "--inventory", str(path), "--store", str(tmp_path / "s.db")])


# --- the journal's rows read back or refused --------------------------------------------------


def _journal(store: object) -> tuple[Any, Any]:
    from agentgate.store.broker_leases import BrokerLeaseStore

    journal = BrokerLeaseStore(store)  # type: ignore[arg-type]
    busy_broker(journal, FakeClock())
    return journal, BrokerLeaseStore


@pytest.mark.parametrize("value", ["no", 0, None])
def test_a_queue_row_whose_draining_is_no_boolean_is_unreadable(sqlite_store: Any, value: object) -> None:
    """B18 (`draining` not checked to be a boolean): a stored queue row whose `draining` reads
    "no", 0 or null is refused as unreadable state (StoreError), not restored as a reservation
    whose draining flag is whatever that value's truth is."""
    import json

    from agentgate.errors import StoreError

    _, journal_cls = _journal(sqlite_store)
    with sqlite_store.transaction() as tx:
        rows = tx.execute("SELECT request_id, body FROM broker_queue")
        assert rows
        for request_id, body in rows:
            tx.execute(
                "UPDATE broker_queue SET body = ? WHERE request_id = ?",
                (json.dumps({**json.loads(body), "draining": value}), request_id),
            )
    with pytest.raises(StoreError, match=r"unreadable.*draining"):
        journal_cls(sqlite_store).load()


def test_a_queued_request_without_a_deadline_reads_back_without_one(sqlite_store: Any) -> None:
    """B23 (an endless deadline stored as 1e18): a snapshot whose queued request never times out
    (as journals before R36 wrote nominated requests) is stored with no deadline (NULL) and reads
    back equal, with the deadline inf, not as one due in 3e10 years."""
    import dataclasses

    journal, journal_cls = _journal(sqlite_store)
    saved = journal.load()
    assert saved is not None and saved.queue
    endless = dataclasses.replace(saved.queue[0], deadline=math.inf)
    snapshot = dataclasses.replace(saved, queue=(endless, *saved.queue[1:]))
    journal.save(snapshot)
    with sqlite_store.transaction() as tx:
        rows = tx.execute("SELECT deadline FROM broker_queue WHERE request_id = ?", (endless.request.id,))
    assert rows == [(None,)]
    again = journal_cls(sqlite_store).load()
    assert again == snapshot
    assert again.queue[0].deadline == math.inf


# --- taking the journal over: a restart takes a broker name over only from the state it loaded;
# the PostgreSQL test interleaves a second connection's committed work between two statements
# of a real transaction (``_Hooked``, from test_store_leases) ----------------------------------


def _journaled_broker(store: Store) -> tuple[Any, Any, Any]:
    """A busy broker (``busy_broker``) journaled in ``store``, its journal and its clock."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    clock = FakeClock()
    journal = BrokerLeaseStore(store)
    return busy_broker(journal, clock), journal, clock


def test_a_restore_of_an_equal_copy_is_refused_once_the_old_broker_wrote_again(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills B10 (``_may_take_over`` telling the snapshot loaded by identity only) and B11 (``save``
    not raising the generation): a restore given
    an equal copy of what the journal loaded skipped the generation check, and took the name over
    although the old broker had written since (here the very same state again: it still runs, and
    would go on granting). Rule: a journal takes over only while the stored generation is still
    the one it loaded, whichever object holds the snapshot restored."""
    import copy

    from agentgate.store.broker_leases import BrokerLeaseStore

    _, old, _ = _journaled_broker(sqlite_store)
    new = BrokerLeaseStore(sqlite_store)
    saved = new.load()
    assert saved is not None
    old.save(saved)  # the old broker is still alive: it writes (the same state) after the load
    new.take_over(copy.deepcopy(saved))
    with pytest.raises(StoreError, match="written over"):
        new.save(saved)
    assert BrokerLeaseStore(sqlite_store).load() == saved


def test_a_state_written_over_by_a_broker_of_before_generations_is_not_taken_over(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills B6 (``_may_take_over`` trusting generation 0 without comparing the state): during a
    rolling upgrade the old broker, of a version from before ``generation``, writes 0 every time;
    it granted again after the new one loaded, and the mutant let the new one take the name over
    with the stale state: the GPUs of that grant handed out twice. Rule: at generation 0 the
    stored state itself must still be the one loaded."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    def as_before_r40() -> None:
        with sqlite_store.transaction() as tx:
            tx.execute("UPDATE broker_state SET generation = 0")

    broker, _, clock = _journaled_broker(sqlite_store)
    as_before_r40()
    new = BrokerLeaseStore(sqlite_store)
    saved = new.load()
    assert saved is not None
    clock.now += 1
    broker.release("low")  # the old version goes on: "high" is granted low's GPUs
    as_before_r40()
    new.take_over(saved)
    with pytest.raises(StoreError, match="written over"):
        new.save(saved)


def test_a_snapshot_restored_into_a_store_that_holds_none_is_taken_over(tmp_path: Any) -> None:
    """Kills B7 (``_may_take_over`` refusing when nothing is stored): a broker restored from a
    snapshot of another store (a move to a new database) could never journal, every grant
    failing with ``StoreError``. Rule: where no broker wrote the name, a restore takes it over."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    first, second = SQLiteStore(tmp_path / "one.db"), SQLiteStore(tmp_path / "two.db")
    try:
        _journaled_broker(first)
        saved = BrokerLeaseStore(first).load()
        assert saved is not None
        moved = BrokerLeaseStore(second)
        moved.take_over(saved)
        moved.save(saved)
        assert BrokerLeaseStore(second).load() == saved
    finally:
        first.close()
        second.close()


def test_a_journal_that_never_loaded_the_stored_state_does_not_take_it_over(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills B8 (``_may_take_over`` granting a take-over without a snapshot when a state is
    stored): a broker started without restoring wrote its empty state over the name, so the
    leases the stored state held were forgotten and their GPUs granted again. Rule: a take-over
    names the state it restored, and a stored state that is not it is never written over."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    _, _, _ = _journaled_broker(sqlite_store)
    stored = BrokerLeaseStore(sqlite_store).load()
    fresh = BrokerLeaseStore(sqlite_store)
    fresh.take_over()
    assert stored is not None
    with pytest.raises(StoreError):
        fresh.save(type(stored)(stored.taken_at + 1, (), ()))
    assert BrokerLeaseStore(sqlite_store).load() == stored


def test_a_snapshot_loaded_elsewhere_is_not_restored_over_a_newer_state(sqlite_store: SQLiteStore) -> None:
    """Kills B9 (``_may_take_over`` not comparing the stored state with a snapshot loaded by
    another journal): a broker restored from a snapshot read earlier elsewhere (the CLI, another
    replica) took the name over although the old broker had granted since: the GPUs of that
    grant handed out twice. Rule: such a take-over needs the stored state to be that snapshot."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    broker, _, clock = _journaled_broker(sqlite_store)
    earlier = BrokerLeaseStore(sqlite_store).load()
    assert earlier is not None
    clock.now += 1
    broker.release("low")  # the old broker grants low's GPUs to "high" after that read
    fresh = BrokerLeaseStore(sqlite_store)
    fresh.take_over(earlier)
    with pytest.raises(StoreError, match="written over"):
        fresh.save(earlier)
    assert BrokerLeaseStore(sqlite_store).load() == broker.snapshot()


@pytest.mark.postgres
def test_a_load_that_a_write_overtakes_reads_one_whole_state(postgres_url: str) -> None:
    """Kills B14 (``load`` not reading the generation again after the rows): on PostgreSQL a save
    committed between the read of the leases and that of the queue gave the mutant the old
    leases with the new queue, a state no broker ever had (a waiter shown with the GPUs it was
    granted meanwhile). Rule: ``load`` returns one whole saved state."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    one, two = _pg(postgres_url), _pg(postgres_url)
    try:
        broker, _, clock = _journaled_broker(two)
        before = broker.snapshot()

        def release() -> None:
            clock.now += 1
            broker.release("low")  # "high" leaves the queue and takes low's GPUs: both tables change

        hooked = _Hooked(one, "SELECT lease_id, body FROM broker_leases", meanwhile=release)
        loaded = BrokerLeaseStore(hooked).load()  # type: ignore[arg-type]
        after = broker.snapshot()
        assert hooked.fired == 1
        assert before != after
        assert loaded == after
    finally:
        one.close()
        two.close()


def test_a_broker_saving_under_its_name_leaves_another_names_state_whole(store: Store) -> None:
    """Kills B20 and B21 (``save`` deleting the leases, or the queue, of every broker name) and
    B22 (``_generation`` reading the newest generation of any name): brokers sharing one store
    lost each other's leases and waiters at every save (a restart then found GPUs free that
    were leased), or a journal could not load nor take over its own name. Rule: a journal reads
    and writes only its own name's rows."""
    from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
    from agentgate.store.broker_leases import BrokerLeaseStore

    clock = FakeClock()
    east = busy_broker(BrokerLeaseStore(store, "east"), clock)  # many saves: a high generation
    before = east.snapshot()
    west = Broker(
        synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock, journal=BrokerLeaseStore(store, "west")
    )
    west.submit(GangRequest("solo", "a", 1))
    assert BrokerLeaseStore(store, "east").load() == before
    journal = BrokerLeaseStore(store, "west")
    saved = journal.load()
    assert saved is not None and [lease.id for lease in saved.leases] == ["solo"]
    journal.take_over(saved)
    journal.save(saved)  # the restarted west broker takes its name over
    assert BrokerLeaseStore(store, "east").load() == before
