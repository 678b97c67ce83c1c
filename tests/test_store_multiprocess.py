"""The stores and the audit log shared by several real processes.

Every test here starts separate Python processes (``multiprocessing``) that run agentgate code on one
SQLite file or one PostgreSQL database, releases them together (a start file), and then checks
what they left behind from the test process: one gap-free chain that verifies, budgets never
overspent, revocations and nonces seen across processes.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _forked import Worker

from agentgate.audit.merkle import leaf_hash, verify_consistency, verify_inclusion
from agentgate.audit.note import open_checkpoint
from agentgate.audit.proof import verify_bundle
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger

ORIGIN = "test.example/audit"
SEED = b"\x07" * 32

WORKER = r"""
import json, os, sys, time
from pathlib import Path

mode, url, go, me = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
extra = json.loads(sys.argv[5])

from agentgate.errors import AgentGateError, BudgetExceeded
from agentgate.keys import SigningKey
from agentgate.store import open_store

store = open_store(url)
out = {}

def wait_for_go():
    deadline = time.monotonic() + 30
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no start signal")
        time.sleep(0.002)

if mode == "append":
    from agentgate.store.audit import AuditLog
    log = AuditLog(store, SigningKey(b"\x07" * 32), origin="test.example/audit")
    wait_for_go()
    indexes, notes = [], []
    for i in range(extra["n"]):
        fields = {"kind": "allow", "principal": "did:key:z6Mkp" + str(me), "rule": f"p{me}-{i}",
                  "budget_delta": i, "reasons": []}
        if extra.get("batch") and i % 5 == 0:
            indexes += log.append_many([fields, {**fields, "rule": f"p{me}-{i}b"}])
        else:
            indexes.append(log.append(fields))
        if extra.get("checkpoint_every") and i % extra["checkpoint_every"] == 0:
            notes.append(log.checkpoint())
    out = {"indexes": indexes, "notes": notes}

elif mode == "spend":
    from agentgate.store.ledger import BudgetLedger
    ledger = BudgetLedger(store)
    wait_for_go()
    chain, caps = extra["chain"], extra["caps"]
    committed = refused = released = 0
    for i in range(extra["n"]):
        amount = 1 + (me * 7 + i * 3) % extra["max"]
        try:
            r = ledger.reserve(None, chain, caps, amount)
        except BudgetExceeded:
            refused += 1
            continue
        if i % 3 == 0:
            ledger.release(r)
            released += 1
        else:
            actual = amount + (1 if i % 4 == 0 else -1 if amount > 1 else 0)
            try:
                short = ledger.commit(r, actual, exhaust=True)
            except BudgetExceeded:
                raise
            committed += actual - short
    out = {"committed": committed, "refused": refused, "released": released}

elif mode == "overrun":
    # Threads of even processes settle calls that ran over their reservation (exhaust), the
    # others reserve, commit and release small amounts on the same budgets at the same time.
    import threading
    from agentgate.store.ledger import BudgetLedger
    ledger = BudgetLedger(store)
    wait_for_go()

    def run(t):
        for i in range(extra["n"]):
            grant = "g%d" % (i // extra["per_grant"])
            try:
                r = ledger.reserve(None, [grant], {grant: extra["cap"]}, 5)
            except BudgetExceeded:
                continue
            if (me + t) % 2 == 0:
                ledger.commit(r, 50, exhaust=True)
            elif i % 2:
                ledger.release(r)
            else:
                ledger.commit(r, 5)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(extra["threads"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

elif mode == "settle":
    from agentgate.errors import InputError
    from agentgate.store.ledger import BudgetLedger
    ledger = BudgetLedger(store)
    wait_for_go()
    won = []
    for r in extra["reservations"][:: 1 if me % 2 == 0 else -1]:
        try:
            if me % 2 == 0:
                ledger.commit(r, extra["actual"])
            else:
                ledger.release(r)
        except InputError:
            continue
        won.append(r)
    out = {"won": won}

elif mode == "nonce":
    from agentgate.store.grants import GrantRepository
    repo = GrantRepository(store)
    wait_for_go()
    fresh = []
    for i in range(extra["n"]):
        status = repo.consume_nonce("did:key:zAlice", f"n{i}", 2**40, ["root", "leaf"])
        if status == "fresh":
            fresh.append(i)
    repo.close()
    out = {"fresh": fresh}

elif mode == "revoke-watch":
    from agentgate.store.grants import GrantRepository
    repo = GrantRepository(store)
    Path(extra["ready"]).write_text("ready")
    wait_for_go()
    status = repo.consume_nonce("did:key:zAlice", "after-revoke-" + str(me), 2**40, ["root", "leaf"])
    out = {"status": status}
    repo.close()

store.close()
print(json.dumps(out))
"""


def _start(tmp_path: Path, mode: str, url: str, extras: list[dict[str, Any]]) -> list[Worker]:
    """Start one worker per ``extras`` item and release them at once."""
    go = tmp_path / f"go-{mode}-{time.monotonic_ns()}"
    workers = [
        Worker(tmp_path, WORKER, [mode, url, str(go), str(me), json.dumps(extra)])
        for me, extra in enumerate(extras)
    ]
    go.touch()
    return workers


def _finish(workers: list[Worker]) -> list[dict[str, Any]]:
    """Wait for the workers; their JSON results."""
    return [w.result() for w in workers]


def _run_together(tmp_path: Path, mode: str, url: str, extras: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run one worker per ``extras`` item, released at once, and return their JSON results."""
    return _finish(_start(tmp_path, mode, url, extras))


@pytest.fixture
def shared(store: Store) -> Iterator[Store]:
    """``store`` (SQLite file or PostgreSQL database) with the audit and ledger tables created."""
    AuditLog(store, SigningKey(SEED), origin=ORIGIN)
    BudgetLedger(store)
    yield store


# --- audit log -------------------------------------------------------------------------------------


def test_three_processes_appending_and_checkpointing_make_one_chain(shared: Store, tmp_path: Path) -> None:
    n = 16
    results = _run_together(
        tmp_path,
        "append",
        shared.url,
        [{"n": n, "checkpoint_every": 5 if me < 2 else 0, "batch": me == 2} for me in range(3)],
    )
    log = AuditLog(shared, SigningKey(SEED), origin=ORIGIN)
    got = sorted(i for r in results for i in r["indexes"])
    size = log.size()
    assert got == list(range(size)), "indexes must be 0..size-1, each once"
    # Every entry carries its own index, and each process's entries appear in its own order.
    rules_by_proc: dict[str, list[int]] = {}
    for entry in log.entries():
        assert entry.rule is not None
        rules_by_proc.setdefault(entry.rule.split("-")[0], []).append(entry.index)
    for indexes in rules_by_proc.values():
        assert indexes == sorted(indexes)
    assert sum(len(v) for v in rules_by_proc.values()) == size
    # Checkpoints signed while the others appended: each verifies, and they all lie on one tree.
    notes = log.checkpoints()
    assert len(notes) >= 3
    report = log.verify()
    assert report.ok, report.problems
    assert report.checkpoints_checked == len(notes)
    leaves = [leaf_hash(log.entry_bytes(i)) for i in range(size)]
    cps = sorted(
        {(c.size, c.root) for c in (open_checkpoint(n_, SigningKey(SEED).public, ORIGIN) for n_ in notes)}
    )
    assert len({s for s, _ in cps}) == len(cps), "two checkpoints of one size disagree (a fork)"
    for (s1, r1), (s2, r2) in itertools.pairwise(cps):
        verify_consistency(s1, s2, log.consistency(s1, s2), r1, r2)
    final = log.checkpoint()
    for index in (0, size // 2, size - 1):
        bundle = log.prove(index, final)
        verify_bundle(bundle.text(), SigningKey(SEED).public, ORIGIN)
        cp = open_checkpoint(final, SigningKey(SEED).public, ORIGIN)
        verify_inclusion(leaves[index], index, cp.size, list(bundle.proof), cp.root)


def test_cli_verify_passes_while_several_processes_append(
    shared: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.cli.main import main
    from agentgate.keys import save_key

    save_key(SigningKey(SEED), tmp_path, "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    procs = _start(tmp_path, "append", shared.url, [{"n": 30, "checkpoint_every": 4} for _ in range(2)])
    runs = 0
    while runs < 3 or any(p.poll() is None for p in procs):  # verify, again and again, during the appends
        code = main(["audit", "verify", "--store", shared.url])
        assert code == 0, capsys.readouterr()
        runs += 1
    _finish(procs)
    assert main(["audit", "verify", "--store", shared.url]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("intact: 60 entries")


# --- budgets -----------------------------------------------------------------------------------------


def test_processes_reserving_settling_and_releasing_never_overspend(shared: Store, tmp_path: Path) -> None:
    cap_org, cap_agent = 300, 200
    chain = ["org", "team", "agent"]
    caps = {"org": cap_org, "agent": cap_agent}
    results = _run_together(
        tmp_path, "spend", shared.url, [{"n": 45, "chain": chain, "caps": caps, "max": 9} for _ in range(3)]
    )
    ledger = BudgetLedger(shared)
    # The agent's budget is the tighter one: what the workers saw charged (less any shortfall)
    # is what it spent. The org's may have been charged a little more on an overrun the agent's
    # budget could not cover (each grant is charged what it can).
    committed = sum(r["committed"] for r in results)
    assert committed == ledger.spent("agent") <= cap_agent
    assert committed <= ledger.spent("org") <= cap_org
    # Every reservation is settled, and each budget adds up exactly: cap = remaining + spent.
    assert shared.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")[0][0] == 0
    assert ledger.remaining("agent") == cap_agent - ledger.spent("agent")
    assert ledger.remaining("org") == cap_org - ledger.spent("org")
    assert sum(r["refused"] for r in results) > 0, "the budget must have run out during the race"


def test_overruns_settled_with_exhaust_while_others_reserve_never_overspend(
    shared: Store, tmp_path: Path
) -> None:
    """``commit(exhaust=True)`` read what was left, then zeroed it: on PostgreSQL a reservation
    taken by another process in between was charged twice (spent 160 of a cap of 120)."""
    cap, per_grant = 120, 30
    _run_together(
        tmp_path,
        "overrun",
        shared.url,
        [{"n": 200, "per_grant": per_grant, "cap": cap, "threads": 6} for _ in range(2)],
    )
    rows = shared.query("SELECT grant_id, cap, remaining, spent FROM budget_ledger")
    assert len(rows) == 200 // per_grant + 1
    assert shared.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")[0][0] == 0
    broken = [r for r in rows if r[2] + r[3] != r[1] or r[3] > r[1]]
    assert not broken, f"(grant, cap, remaining, spent) that do not add up: {broken}"


def test_settlement_and_release_racing_settle_each_reservation_once(shared: Store, tmp_path: Path) -> None:
    ledger = BudgetLedger(shared)
    reservations = [
        ledger.reserve(None, ["org", "agent"], {"org": 1000, "agent": 400}, 10) for _ in range(40)
    ]
    assert ledger.remaining("agent") == 0
    results = _run_together(
        tmp_path, "settle", shared.url, [{"reservations": reservations, "actual": 7} for _ in range(2)]
    )
    committed, released = set(results[0]["won"]), set(results[1]["won"])
    assert not committed & released and committed | released == set(reservations)
    assert ledger.spent("agent") == ledger.spent("org") == 7 * len(committed)
    assert ledger.remaining("agent") == 400 - 7 * len(committed)
    assert ledger.remaining("org") == 1000 - 7 * len(committed)
    states = dict(shared.query("SELECT state, COUNT(*) FROM budget_reservations GROUP BY state"))
    assert states == {k: v for k, v in (("committed", len(committed)), ("released", len(released))) if v}


# --- nonces and revocation -------------------------------------------------------------------------


def test_a_nonce_is_fresh_in_exactly_one_process(shared: Store, tmp_path: Path) -> None:
    results = _run_together(tmp_path, "nonce", shared.url, [{"n": 30} for _ in range(2)])
    fresh = sorted(i for r in results for i in r["fresh"])
    assert fresh == list(range(30)), "each nonce is accepted once, across all processes"


def test_a_revocation_is_seen_by_other_processes_on_their_next_decision(
    shared: Store, tmp_path: Path
) -> None:
    from agentgate.store.grants import GrantRepository

    repo = GrantRepository(shared)
    ready = [tmp_path / "ready-0"]
    go = tmp_path / "go-revoke"
    procs = [
        Worker(
            tmp_path, WORKER, ["revoke-watch", shared.url, str(go), str(me), json.dumps({"ready": str(r)})]
        )
        for me, r in enumerate(ready)
    ]
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in ready):  # it has opened the store (and its hot connection)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert repo.revoke("leaf", now=1)
    go.touch()
    for proc in procs:
        assert proc.result() == {"status": "revoked"}
    repo.close()


def test_sqlite_store_file_is_shared_not_copied(tmp_path: Path) -> None:
    """The SQLite URL forms name one file: a worker given ``sqlite:///abs`` writes where the test reads."""
    path = tmp_path / "shared.db"
    with SQLiteStore(path) as store:
        AuditLog(store, SigningKey(SEED), origin=ORIGIN)
    _run_together(tmp_path, "append", "sqlite:///" + str(path), [{"n": 3}])
    with SQLiteStore(path) as store:
        assert AuditLog(store, SigningKey(SEED), origin=ORIGIN).size() == 3


# --- tampering ---------------------------------------------------------------------------------------


def _strip_constraints(store: Store, *statements: str) -> None:
    """As an attacker with the owner's rights: drop the append-only triggers and NOT NULL, then edit."""
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            tx.execute("ALTER TABLE audit_log RENAME TO audit_log_old")
            tx.execute("CREATE TABLE audit_log (idx INTEGER PRIMARY KEY, entry BLOB, leaf_hash BLOB)")
            tx.execute("INSERT INTO audit_log SELECT * FROM audit_log_old")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
            tx.execute("ALTER TABLE audit_log ALTER COLUMN entry DROP NOT NULL")
            tx.execute("ALTER TABLE audit_log ALTER COLUMN leaf_hash DROP NOT NULL")
        for statement in statements:
            tx.execute(statement)


def test_a_nulled_entry_or_leaf_hash_is_reported_not_a_crash(
    shared: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify, checkpoint and prove raised TypeError (a traceback from ``audit verify``)."""
    from agentgate.cli.main import main
    from agentgate.errors import TamperDetected
    from agentgate.keys import save_key

    log = AuditLog(shared, SigningKey(SEED), origin=ORIGIN)
    for i in range(6):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    log.checkpoint()
    _strip_constraints(
        shared,
        "UPDATE audit_log SET entry = NULL WHERE idx = 2",
        "UPDATE audit_log SET leaf_hash = NULL WHERE idx = 4",
    )
    report = log.verify()
    assert not report.ok and report.first_bad_index == 2
    assert report.problems[:2] == (
        "entry 2: bytes do not match the stored leaf hash (entry edited)",
        "entry 4: bytes do not match the stored leaf hash (entry edited)",
    )
    with pytest.raises(TamperDetected):
        log.checkpoint()
    with pytest.raises(TamperDetected):
        log.entry(2)
    save_key(SigningKey(SEED), tmp_path, "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    assert main(["audit", "verify", "--store", shared.url]) == 1


# --- PostgreSQL stopped and restarted ------------------------------------------------------------------


@pytest.mark.postgres
def test_postgresql_restart_fails_closed_then_the_pool_recovers_at_once(postgres_server: Any) -> None:
    """Every idle pooled connection was dead after a restart, and each failed one more decision
    once the server was back (3 here, up to the pool's size); now at most the first one does."""
    import threading

    from agentgate.errors import AuditError, StoreError
    from agentgate.store._postgres import PostgresStore
    from agentgate.store.grants import GrantRepository

    store = PostgresStore(postgres_server.create_database(), max_size=8)
    log = AuditLog(store, SigningKey(SEED), origin=ORIGIN)
    ledger = BudgetLedger(store)
    repo = GrantRepository(store)
    together = threading.Barrier(5)

    def hold() -> None:
        with store.transaction() as tx:
            tx.execute("SELECT 1")
            together.wait(timeout=30)

    threads = [threading.Thread(target=hold) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 5  # the pool takes connections back on its own worker, not at once
    while store.pool.get_stats()["pool_available"] < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.pool.get_stats()["pool_available"] >= 5
    timeout = store.pool.timeout
    store.pool.timeout = 1.0  # fails closed as it would after the full wait, sooner
    postgres_server.stop("fast")
    try:
        with pytest.raises(AuditError):
            log.append({"kind": "allow", "principal": "did:key:zAlice"})
        with pytest.raises(StoreError):
            repo.consume_nonce("did:key:zAlice", "down", 2**40, ["root"])
    finally:
        postgres_server.start()
        store.pool.timeout = timeout  # the server back, decisions wait as in production
    failures = 0
    for i in range(8):
        try:
            with store.transaction() as tx:
                ledger.reserve(tx, ["root"], {"root": 100}, 1)
                log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": 1}, tx=tx)
        except (AuditError, StoreError):
            failures += 1
        try:
            repo.consume_nonce("did:key:zAlice", f"n{i}", 2**40, ["root"])
        except StoreError:
            failures += 1
    assert failures <= 1, f"{failures} decisions failed after the server was back"
    # Nothing half-written: each entry went with its reservation, and the chain verifies.
    assert log.verify().ok
    assert ledger.remaining("root") == 100 - log.size()
    assert store.pool.get_stats()["pool_size"] <= 8
    repo.close()
    store.close()


# --- quotas ----------------------------------------------------------------------------------------------


def test_a_decider_whose_clock_is_just_before_the_boundary_cannot_restart_a_full_window(
    shared: Store,
) -> None:
    """The first count in a new window deleted every older window; a process that read the clock
    just before the boundary (or a host whose clock lags) then found its full window gone and
    started it again from zero: one more call than the limit in that window, each time."""
    from agentgate.policy._index import QuotaRef
    from agentgate.store.quotas import QuotaCounter

    counter = QuotaCounter(shared)
    quota = QuotaRef("per-minute", "tenant:acme", 60, 2, "calls")
    before, after = 600 * 60 - 0.001, 600 * 60 + 0.001  # either side of a window boundary
    with shared.transaction() as tx:
        assert counter.count(tx, [quota], {"calls": 1}, before) is None
        assert counter.count(tx, [quota], {"calls": 1}, before) is None
        assert counter.count(tx, [quota], {"calls": 1}, before) == quota  # full
    with shared.transaction() as tx:  # another process is already past the boundary
        assert counter.count(tx, [quota], {"calls": 1}, after) is None
    with shared.transaction() as tx:  # the lagging one: its window is still full
        assert counter.count(tx, [quota], {"calls": 1}, before) == quota
    assert counter.used(quota, before) == 2 and counter.used(quota, after) == 1
    with shared.transaction() as tx:  # one window on, the lagging one's window is still kept
        assert counter.count(tx, [quota], {"calls": 1}, after + 60) is None
    # Since review R60 windows are dropped only an hour (or one window, if longer) on: a clock two
    # windows behind still finds its count (tests/test_ledger_r60_quota_windows.py).
    assert [r[0] for r in shared.query("SELECT window_start FROM quota_usage ORDER BY window_start")] == [
        35940,
        36000,
        36060,
    ]
    with shared.transaction() as tx:  # an hour on, the windows before it are dropped
        assert counter.count(tx, [quota], {"calls": 1}, after + 3600) is None
    assert [r[0] for r in shared.query("SELECT window_start FROM quota_usage ORDER BY window_start")] == [
        36000,
        36060,
        39600,
    ]


# --- least privilege ---------------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_role_that_may_only_read_and_write_the_tables_can_start_every_store(postgres_server: Any) -> None:
    """docs/operations.md: agentgate creates nothing that already exists, so a role without CREATE
    can start it. The grants, quota, lease and dead-letter stores ran ``CREATE TABLE IF NOT
    EXISTS``, which PostgreSQL refuses without the CREATE privilege even when the table exists."""
    from agentgate.store._postgres import PostgresStore
    from agentgate.store.approvals import ApprovalStore
    from agentgate.store.broker_decisions import BrokerDecisionStore
    from agentgate.store.broker_leases import BrokerLeaseStore
    from agentgate.store.dead_letters import DeadLetterStore
    from agentgate.store.grants import GrantRepository
    from agentgate.store.leases import LeaseManager, SharedBreakers, SharedRateLimits
    from agentgate.store.quotas import QuotaCounter

    kinds = (
        AuditLog,
        BudgetLedger,
        ApprovalStore,
        GrantRepository,
        QuotaCounter,
        LeaseManager,
        SharedRateLimits,
        SharedBreakers,
        DeadLetterStore,
        BrokerDecisionStore,
        BrokerLeaseStore,
    )

    def open_all(store: Store) -> list[Any]:
        return [
            k(store, SigningKey(SEED), origin=ORIGIN) if k is AuditLog else k(store)  # type: ignore[call-arg]
            for k in kinds
        ]

    url = postgres_server.create_database()
    with PostgresStore(url) as owner:
        open_all(owner)
        with owner.transaction() as tx:
            tx.execute(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ag_rw') "
                "THEN CREATE ROLE ag_rw LOGIN; END IF; END $$"
            )
            tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            tx.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ag_rw")
    app_url = url.replace(f"postgresql://{postgres_server.user}@", "postgresql://ag_rw@")
    with PostgresStore(app_url) as app:
        opened = open_all(app)
        repo = opened[kinds.index(GrantRepository)]
        assert repo.consume_nonce("did:key:zAlice", "n1", 2**40, ["root"]) == "fresh"
        assert repo.revoke("root", now=1)
        assert repo.consume_nonce("did:key:zAlice", "n2", 2**40, ["root"]) == "revoked"
        repo.close()


def test_rows_swapped_after_the_last_checkpoint_are_named_and_never_signed(shared: Store) -> None:
    """Two rows swapped (entries and leaf hashes moved together) after the last checkpoint:
    verify said intact, and the next checkpoint signed them. Each entry carries its index."""
    from agentgate.errors import TamperDetected

    log = AuditLog(shared, SigningKey(SEED), origin=ORIGIN)
    for i in range(8):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    log.checkpoint()
    for i in range(8, 12):
        log.append({"kind": "deny" if i == 10 else "allow", "principal": "did:key:zAlice", "budget_delta": i})
    assert log.verify().ok
    _strip_constraints(
        shared,
        "UPDATE audit_log SET idx = -1 WHERE idx = 9",
        "UPDATE audit_log SET idx = 9 WHERE idx = 10",
        "UPDATE audit_log SET idx = 10 WHERE idx = -1",
    )
    report = log.verify()
    assert report.first_bad_index == 9
    assert report.problems == (
        "entry 9: holds the entry of index 10 (rows moved, inserted or reordered)",
        "entry 10: holds the entry of index 9 (rows moved, inserted or reordered)",
    )
    with pytest.raises(TamperDetected, match="entry 9 does not carry its own index"):
        log.checkpoint()
    assert len(log.checkpoints()) == 1


def test_a_checkpoint_row_whose_columns_were_edited_is_named_by_verify(shared: Store) -> None:
    """checkpoint() refused to sign (the latest row no longer matched its note) while verify,
    which read only the notes, said the log was intact: the operator had no way to see why."""
    from agentgate.errors import TamperDetected

    log = AuditLog(shared, SigningKey(SEED), origin=ORIGIN)
    for i in range(4):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    log.checkpoint()
    log.append({"kind": "allow", "principal": "did:key:zAlice"})
    with shared.transaction() as tx:
        if shared.dialect == "sqlite":
            tx.execute("DROP TRIGGER audit_checkpoints_no_update")
        else:
            tx.execute("ALTER TABLE audit_checkpoints DISABLE TRIGGER USER")
        tx.execute("UPDATE audit_checkpoints SET size = 3")
    with pytest.raises(TamperDetected, match="does not match its signed note"):
        log.checkpoint()
    report = log.verify()
    assert report.problems == (
        "checkpoint #1: its size or root column does not match its signed note (row edited)",
    )


def test_a_far_off_expiry_never_prunes_live_nonces(store: Store) -> None:
    # The store pruned nonces older than (the invocation's own signed expiry - 1 h): one caller
    # signing a far-off expiry at the 1,024th nonce deleted every live nonce, reopening replay
    # (review R5; decisions also refuse such invocations now).
    from agentgate.store.grants import GrantRepository

    repo = GrantRepository(store)
    soon = int(time.time()) + 60
    assert repo.consume_nonce("did:key:zAlice", "live", soon, ["root"]) == "fresh"
    for i in range(1024):
        repo.consume_nonce("did:key:zMallory", f"far-{i}", 2**40, ["root"])
    assert repo.consume_nonce("did:key:zAlice", "live", soon, ["root"]) == "replay"


def test_an_unreachable_postgresql_says_why_at_once() -> None:
    # It waited 10 s and said "pool initialization incomplete"; the reason was only in the pool's
    # warnings (review R1).
    from agentgate.errors import StoreError
    from agentgate.store._postgres import PostgresStore

    # The pool's wait, the defect's 10 s by default, is made 60 s: "at once" (milliseconds) and
    # that wait are then far apart on any machine.
    started = time.monotonic()
    with pytest.raises(StoreError, match="refused") as raised:
        PostgresStore("postgresql://agent:s3cret@127.0.0.1:1/db", timeout_s=60.0)
    assert time.monotonic() - started < 8 and "s3cret" not in str(raised.value)
