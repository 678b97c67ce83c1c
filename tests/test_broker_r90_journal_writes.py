"""Review R90: the broker's journal writes only the rows that changed (agentgate/store/broker_leases.py).

Each ``save`` deleted every row of the broker's name and wrote the whole state again, encoding each
waiting request as JSON: with 2,000 requests waiting a submit spent about 20 ms in the journal
(``benchmarks/broker.py``'s ``journal`` rows). A journal now remembers what its last write stored
and writes the difference (rows gone deleted, new or changed ones written, a request's body encoded
again only when the request changed); a write that takes the name over, follows a failed write, or
finds a generation it did not write, writes the whole state. What ``load`` reads back is the
broker's state after every kind of change, on both stores.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from test_broker_store import FakeClock

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    TenantQuota,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.errors import AgentGateError, StoreError
from agentgate.store import SQLiteStore, Store
from agentgate.store.broker_leases import BrokerLeaseStore


def _broker(journal: BrokerLeaseStore, clock: FakeClock) -> Broker:
    """Two nodes of 8; draining on (a gang waiting 5 s reserves GPUs as their leases end)."""
    quotas = [TenantQuota("a", 16, cohort="lab"), TenantQuota("b", 12, cohort="lab")]
    return Broker(
        synthetic_topology(2, 8),
        quotas,
        clock=clock,
        ttl_s=60,
        grace_s=20,
        journal=journal,
        drain_after_s=5.0,
        locality_wait_s=10.0,
        max_draining=2,
    )


def _stored(store: Store, broker: Broker) -> None:
    """What a fresh journal reads back is the broker's state."""
    loaded = BrokerLeaseStore(store).load()
    assert loaded is not None
    assert loaded.leases == tuple(broker.leases())
    assert loaded.queue == tuple(broker.queue())


def test_what_is_read_back_is_the_state_after_every_kind_of_change(store: Store) -> None:
    """Grants, releases, renewals, preemption notices, nominations, draining reservations,
    timeouts, withdrawals and expiries, in a random order: the journal's rows are the broker's
    state after each call."""
    rng = random.Random(90)
    clock = FakeClock()
    broker = _broker(BrokerLeaseStore(store), clock)
    drained = 0
    for step in range(160):
        clock.now += rng.choice((0.0, 1.0, 7.0, 25.0))
        held = [lease.id for lease in broker.leases()] + [q.request.id for q in broker.queue()]
        move = rng.random()
        try:
            if move < 0.6 or not held:
                request = GangRequest(
                    f"r{step}",
                    rng.choice("ab"),
                    rng.choice((1, 2, 4, 8)),
                    priority=rng.randint(0, 3),
                    timeout_s=rng.choice((5.0, 40.0, 1e6)),
                    hint=WorkloadHint(rng.choice(("compute", "communication"))),
                    topology=rng.choice((None, TopologyConstraint("node", required=False))),
                )
                broker.submit(request)
            elif move < 0.68:
                broker.release(rng.choice(held))
            elif move < 0.85:
                broker.renew(rng.choice(held))
            else:
                broker.advance()
        except AgentGateError:
            pass  # a renewal of a waiting request, a gang no quota allows: refused, still journaled
        _stored(store, broker)
        drained += any(q.draining for q in broker.queue())
    assert drained  # a request's body changed while it waited (``"draining": true``)


def _count_writes(store: SQLiteStore) -> None:
    with store.transaction() as tx:
        tx.execute("CREATE TABLE written (n INTEGER NOT NULL)")
        tx.execute("INSERT INTO written VALUES (0)")
        for table in ("broker_queue", "broker_leases"):
            for event in ("INSERT", "UPDATE", "DELETE"):
                tx.execute(
                    f"CREATE TRIGGER count_{table}_{event.lower()} AFTER {event} ON {table} "
                    "BEGIN UPDATE written SET n = n + 1; END"
                )


def _written(store: SQLiteStore) -> int:
    with store.transaction(immediate=False) as tx:
        n = tx.execute("SELECT n FROM written")[0][0]
        tx.execute("UPDATE written SET n = 0")
    return int(n)


def test_a_submit_behind_a_long_queue_writes_one_row(sqlite_store: SQLiteStore) -> None:
    clock = FakeClock()
    broker = _broker(BrokerLeaseStore(sqlite_store), clock)
    broker.submit(GangRequest("hold", "a", 16, priority=3))
    for i in range(200):
        broker.submit(GangRequest(f"w{i}", "a", 8, timeout_s=1e6))
    _count_writes(sqlite_store)
    broker.submit(GangRequest("last", "a", 8, timeout_s=1e6))
    assert _written(sqlite_store) == 1  # its own row; before, 201 deleted and 202 written
    broker.release("w7")
    assert _written(sqlite_store) == 1 + 193  # its row deleted, and those behind it move up one
    _stored(sqlite_store, broker)


def test_a_failed_write_is_followed_by_a_whole_one(sqlite_store: SQLiteStore) -> None:
    """A write that fails leaves the journal not knowing what is stored: the next one writes the
    whole state (here the rows a failed write would have changed are changed by hand as well, as
    a write that failed at its commit may have left them)."""
    clock = FakeClock()
    broker = _broker(BrokerLeaseStore(sqlite_store), clock)
    for i in range(4):
        broker.submit(GangRequest(f"w{i}", "a", 8, timeout_s=1e6))
    with sqlite_store.transaction() as tx:
        tx.execute(
            "CREATE TRIGGER refuse AFTER INSERT ON broker_queue WHEN new.request_id = 'bad' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    with pytest.raises(StoreError):
        broker.submit(GangRequest("bad", "b", 4, timeout_s=1e6))
    with sqlite_store.transaction() as tx:
        tx.execute("DROP TRIGGER refuse")
        tx.execute("DELETE FROM broker_queue WHERE request_id = 'w3'")
    broker.submit(GangRequest("next", "b", 4, timeout_s=1e6))
    _stored(sqlite_store, broker)


def test_a_generation_this_journal_did_not_write_is_written_whole(sqlite_store: SQLiteStore) -> None:
    clock = FakeClock()
    broker = _broker(BrokerLeaseStore(sqlite_store), clock)
    for i in range(4):
        broker.submit(GangRequest(f"w{i}", "a", 8, timeout_s=1e6))
    with sqlite_store.transaction() as tx:
        tx.execute("UPDATE broker_state SET generation = generation + 5")
        tx.execute("DELETE FROM broker_queue WHERE request_id = 'w3'")
    broker.submit(GangRequest("next", "b", 4, timeout_s=1e6))
    _stored(sqlite_store, broker)


def test_a_restarted_broker_writes_the_state_it_took_over_whole(store: Store) -> None:
    clock = FakeClock()
    first = _broker(BrokerLeaseStore(store), clock)
    for i in range(5):
        first.submit(GangRequest(f"w{i}", "a", 8, timeout_s=1e6))
    journal = BrokerLeaseStore(store)
    snapshot = journal.load()
    assert snapshot is not None
    second = _broker(journal, clock)
    second.restore(snapshot)
    second.release("w4")
    _stored(store, second)
    with pytest.raises(StoreError, match="journaled by another broker process"):
        first.release("w1")
    _stored(store, second)


def test_a_state_naming_an_id_twice_is_refused_whole(store: Store) -> None:
    """Rows kept by id would keep one of the two: the write is refused, as the store's unique key
    refused it when every write was whole (a snapshot made by hand: a broker's never is)."""
    clock = FakeClock()
    broker = _broker(BrokerLeaseStore(store), clock)
    broker.submit(GangRequest("held", "a", 16, timeout_s=1e6))
    broker.submit(GangRequest("w", "a", 8, timeout_s=1e6))
    snapshot = broker.snapshot()
    journal = BrokerLeaseStore(store)
    assert journal.load() is not None
    journal.take_over()
    for twice in (
        dataclasses.replace(snapshot, queue=snapshot.queue * 2),
        dataclasses.replace(snapshot, leases=snapshot.leases * 2),
    ):
        with pytest.raises(
            StoreError, match=r"names (waiting request|lease) id .* twice; nothing was written"
        ):
            journal.save(twice)
        _stored(store, broker)


def test_a_journal_keeps_the_name_it_was_made_with(sqlite_store: SQLiteStore) -> None:
    """The rows a journal remembers are its name's: the name cannot be changed under them."""
    journal = BrokerLeaseStore(sqlite_store, "east")
    with pytest.raises(AttributeError):
        journal.broker = "west"  # type: ignore[misc]
