"""The stores and the audit log under tampering, several processes and crashes.

SQLite stores what it is given, whatever a column's declared type: a table edited by hand (or
by an old version) can hold text where agentgate wrote integers or bytes. The lookup aids and
checkpoint rows that no signature covers are read with that in mind here.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_audit_scale import KEY, ORIGIN, decision

from agentgate.audit.proof import verify_bundle
from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.keys import save_key
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.audit import AuditLog
from agentgate.store.grants import GrantRepository
from agentgate.store.ledger import BudgetLedger


def _sql(store: SQLiteStore, sql: str, params: tuple[Any, ...] = ()) -> None:
    with store.transaction() as tx:
        tx.execute(sql, params)


def _pair_after_a_block(log: AuditLog) -> tuple[int, int]:
    """A log of more than one 1024-entry block, ending in an allow and its outcome, checkpointed."""
    log.append_many([decision(rule=f"r{i}") for i in range(1100)])
    allow = log.append(decision())
    outcome = log.append(decision("outcome", ref=allow, status="ok"))
    log.checkpoint()
    return allow, outcome


# --- the block-root cache (audit_nodes) ------------------------------------------------------------


@pytest.mark.parametrize("hash_sql", ["'deadbeef'", "'" + "ab" * 16 + "'", "X'00'"])
def test_a_cached_block_root_of_the_wrong_type_is_no_crash(
    sqlite_store: SQLiteStore, hash_sql: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block root stored as text (an old version's hex, or a hand edit) raised TypeError out of
    explain and prove (a traceback from the command line); the cache is no evidence, so such a
    row is a wrong node: the proof is rebuilt from the leaf hashes and the entries still prove."""
    log = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    allow, outcome = _pair_after_a_block(log)
    _sql(sqlite_store, "DELETE FROM audit_nodes")
    _sql(sqlite_store, f"INSERT INTO audit_nodes (level, position, hash) VALUES (10, 0, {hash_sql})")
    explained = log.explain(allow)
    assert [e.index for e in explained.related] == [outcome]
    assert explained.checkpoint is not None and explained.unproven == ()
    bundle = log.prove(outcome)
    entry, _checkpoint = verify_bundle(bundle.text(), KEY.public, ORIGIN)
    assert entry.index == outcome
    save_key(KEY, tmp_path, "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    assert main(["audit", "explain", str(allow), "--store", sqlite_store.url]) == 0


def test_a_cached_block_root_at_a_position_that_is_not_a_number_is_ignored(sqlite_store: SQLiteStore) -> None:
    log = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    allow, outcome = _pair_after_a_block(log)
    _sql(sqlite_store, "DELETE FROM audit_nodes")
    _sql(sqlite_store, "INSERT INTO audit_nodes (level, position, hash) VALUES (10, 0.5, ?)", (bytes(32),))
    _sql(sqlite_store, "INSERT INTO audit_nodes (level, position, hash) VALUES (10, '0', ?)", (b"\x01" * 32,))
    assert [e.index for e in log.explain(allow).related] == [outcome]


# --- checkpoint rows whose columns hold another type ------------------------------------------------


@pytest.mark.parametrize("size_sql", ["'abc'", "X'03'", "3.5"])
def test_a_checkpoint_row_with_a_size_that_is_not_a_whole_number_is_reported(
    sqlite_store: SQLiteStore, size_sql: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of a signed checkpoint row whose size column is text or bytes (the triggers allow
    any INSERT) made verify raise ValueError (it promises a report, never an exception) and
    checkpoint and prove raise it too; a size of 3.5 for a note of 3 passed verify as intact."""
    log = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    for _ in range(3):
        log.append(decision())
    log.checkpoint()
    _sql(
        sqlite_store,
        f"INSERT INTO audit_checkpoints (size, root, note, created) SELECT {size_sql}, root, note, created "
        "FROM audit_checkpoints",
    )
    report = log.verify()
    assert not report.ok
    assert any("checkpoint #2" in p and "row edited" in p for p in report.problems), report.problems
    from agentgate.errors import TamperDetected

    with pytest.raises(TamperDetected):
        log.checkpoint()
    save_key(KEY, tmp_path, "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    assert main(["audit", "verify", "--store", sqlite_store.url]) == 1
    assert main(["audit", "checkpoint", "--store", sqlite_store.url]) == 1


# --- the reference index (audit_refs) ----------------------------------------------------------------


def test_a_reference_changed_to_a_fraction_is_reported_by_verify(sqlite_store: SQLiteStore) -> None:
    """``ref = 0.5`` for an outcome of entry 0 hides the outcome from explain (which looks for 0),
    but verify's comparison formatted the row's reference with %d (0) and called the index intact."""
    log = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    allow = log.append(decision())
    outcome = log.append(decision("outcome", ref=allow, status="ok"))
    assert log.verify().ok
    _sql(sqlite_store, "UPDATE audit_refs SET ref = ref + 0.5 WHERE idx = ?", (outcome,))
    assert log.explain(allow).related == ()  # hidden from explain: what verify is there to catch
    report = log.verify()
    assert not report.ok
    assert any(f"entry {outcome} refers to entry {allow}" in p for p in report.problems), report.problems


# --- hostile store names -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["agent\x00gate.db", "sqlite:///x\x00.db", "postgresql://u@/d\x00b"])
def test_a_store_name_with_a_nul_character_is_a_store_error(url: str) -> None:
    """sqlite3 and libpq raised ValueError ("embedded null byte") out of open_store."""
    with pytest.raises(StoreError, match="NUL"):
        open_store(url)


# --- PostgreSQL: the SECURITY DEFINER trigger that keeps audit_refs ------------------------------------

_APP_GRANTS = (
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ag_r14",
    "REVOKE UPDATE, DELETE ON audit_log, audit_checkpoints FROM ag_r14",
    "REVOKE INSERT, UPDATE, DELETE ON audit_refs, audit_refs_built FROM ag_r14",
    "REVOKE INSERT, UPDATE, DELETE ON audit_repairs FROM ag_r14",
)


@pytest.mark.postgres
def test_the_application_role_cannot_run_its_code_as_the_owner_through_the_index_trigger(
    postgres_server: Any, postgres_url: str
) -> None:
    """The trigger that keeps audit_refs runs as the log's owner (SECURITY DEFINER) with the search
    path it was created under, which left PostgreSQL's temporary schema first: the application role
    of docs/operations.md made a temporary table called audit_refs with a trigger of its own, and
    its next append ran that trigger as the owner, which deleted every signed checkpoint (the
    role itself may not) and wrote audit_refs rows of its choosing."""
    from test_audit_scale import login_role

    from agentgate.store._postgres import PostgresStore

    with PostgresStore(postgres_url) as owner:
        log = AuditLog(owner, KEY, origin=ORIGIN)
        allow = log.append(decision())
        log.checkpoint()
        app_url = login_role(owner, postgres_server, postgres_url, "ag_r14", *_APP_GRANTS)
        with PostgresStore(app_url, min_size=1, max_size=1) as app:  # one session: its temp table
            with app.transaction() as tx:
                tx.execute("CREATE TEMP TABLE audit_refs (idx BIGINT PRIMARY KEY, ref BIGINT)")
                tx.execute(
                    "CREATE FUNCTION pg_temp.as_owner() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "ALTER TABLE public.audit_checkpoints DISABLE TRIGGER USER; "
                    "DELETE FROM public.audit_checkpoints; "
                    "ALTER TABLE public.audit_checkpoints ENABLE TRIGGER USER; "
                    "INSERT INTO public.audit_refs VALUES (77, 0); RETURN NEW; END $$"
                )
                tx.execute(
                    "CREATE TRIGGER as_owner BEFORE INSERT ON pg_temp.audit_refs "
                    "FOR EACH ROW EXECUTE FUNCTION pg_temp.as_owner()"
                )
            outcome = AuditLog(app, KEY, origin=ORIGIN).append(decision("outcome", ref=allow, status="ok"))
        assert owner.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 1
        assert owner.query("SELECT idx, ref FROM audit_refs ORDER BY idx") == [(outcome, allow)]
        assert log.verify().ok


@pytest.mark.postgres
def test_an_index_trigger_made_by_an_earlier_version_is_fixed_when_the_owner_opens_the_log(
    postgres_url: str,
) -> None:
    from agentgate.store._postgres import PostgresStore

    safe = [(["search_path=pg_catalog, public, pg_temp"],)]
    config = "SELECT proconfig FROM pg_proc WHERE proname = 'agentgate_audit_index_ref'"
    with PostgresStore(postgres_url) as owner:
        AuditLog(owner, KEY, origin=ORIGIN)
        assert owner.query(config) == safe
        with owner.transaction() as tx:  # as an earlier version left it
            tx.execute('ALTER FUNCTION agentgate_audit_index_ref() SET search_path = "$user", public')
    with PostgresStore(postgres_url) as owner:
        log = AuditLog(owner, KEY, origin=ORIGIN)
        assert owner.query(config) == safe
        stamp = owner.query("SELECT xmin::text FROM pg_proc WHERE proname = 'agentgate_audit_index_ref'")
        log.append(decision())
    with PostgresStore(postgres_url) as owner:  # set once, not on every start
        AuditLog(owner, KEY, origin=ORIGIN)
        assert (
            owner.query("SELECT xmin::text FROM pg_proc WHERE proname = 'agentgate_audit_index_ref'") == stamp
        )


@pytest.mark.parametrize("url", [":memory:", "sqlite:///:memory:"])
def test_an_in_memory_sqlite_store_is_refused(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite3 took ``:memory:`` as a new, empty database per connection: the store opened, and a
    gateway or Gate on it kept its audit log, budgets and nonces only until the process ended (an
    invocation replayed after a restart was fresh again, the evidence gone), while a second
    connection (another thread) found no tables at all."""
    with pytest.raises(StoreError, match="in-memory"):
        open_store(url)
    monkeypatch.setenv("AGENTGATE_STORE", url)
    with pytest.raises(StoreError, match="in-memory"):
        open_store()


# --- several real processes, one of them killed ------------------------------------------------------

_WORKER = r"""
import os, signal, sys, time
sys.path.insert(0, "tests")
os.environ["AGENTGATE_SQLITE_SYNCHRONOUS"] = "NORMAL"
from test_audit_scale import KEY, ORIGIN, decision
from agentgate.store import open_store
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger
from agentgate.store.grants import GrantRepository

mode, url, me = sys.argv[1], sys.argv[2], sys.argv[3]
store = open_store(url)
log, ledger = AuditLog(store, KEY, origin=ORIGIN), BudgetLedger(store)
if mode == "pairs":  # allow + reservation, then outcome + settlement, as a Gate writes them
    for i in range(8):
        with store.transaction() as tx:
            log.lock(tx)
            held = ledger.reserve(tx, ["root"], {"root": 10_000}, 3)
            allow = log.append(decision(rule=f"p{me}-{i}", budget_delta=3), tx)
        with store.transaction() as tx:
            log.lock(tx)
            ledger.commit(held, 2, tx)
            log.append(decision("outcome", ref=allow, status="ok", budget_delta=2), tx)
        if i % 3 == 0:
            log.checkpoint()
elif mode == "killed":  # killed inside its decision's transaction
    with store.transaction() as tx:
        log.lock(tx)
        ledger.reserve(tx, ["root"], {"root": 10_000}, 5)
        log.append(decision(rule="killed", budget_delta=5), tx)
        print("inside", flush=True)
        time.sleep(60)
elif mode == "nonce":  # records a nonce, then dies at once (no clean close)
    status = GrantRepository(store).consume_nonce("did:key:zAlice", "once-only", 2**40, ["root"])
    print(status, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
print("done", flush=True)
"""


def _spawn(mode: str, url: str, me: int = 0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, mode, url, str(me)],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        text=True,
    )


def _url(store: Store) -> str:
    return f"sqlite:///{store.path}" if isinstance(store, SQLiteStore) else store.url


def test_processes_appending_with_one_killed_mid_transaction_leave_one_indexed_chain(store: Store) -> None:
    """Three processes write allow/outcome pairs with their reservations while a fourth is killed
    (SIGKILL) inside its decision's transaction: nothing of the killed one remains (no entry, no
    reservation), the log verifies, audit_refs is exactly what the entries say, explain pairs every
    allow with its outcome, and the budget is what the settled pairs spent."""
    log, ledger = AuditLog(store, KEY, origin=ORIGIN), BudgetLedger(store)
    url = _url(store)
    writers = [_spawn("pairs", url, me) for me in range(3)]
    killed = _spawn("killed", url)
    assert killed.stdout is not None and killed.stdout.readline().strip() == "inside"
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=30)
    assert killed.returncode == -signal.SIGKILL
    for writer in writers:
        writer.communicate(timeout=120)
        assert writer.returncode == 0
    entries = list(log.entries())
    assert len(entries) == 3 * 8 * 2 and not any(e.rule == "killed" for e in entries)
    log.checkpoint()
    assert log.verify().ok
    said = {e.index: e.ref for e in entries if e.ref is not None}
    assert {int(i): int(r) for i, r in store.query("SELECT idx, ref FROM audit_refs")} == said
    for outcome, allow in said.items():
        assert [e.index for e in log.explain(allow).related] == [outcome]
        explained = log.explain(outcome)
        assert [e.index for e in explained.related] == [allow] and explained.unproven == ()
    assert ledger.remaining("root") == 10_000 - 3 * 8 * 2
    assert store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")[0][0] == 0


def test_a_nonce_recorded_by_a_process_that_was_killed_is_a_replay_for_the_next(store: Store) -> None:
    """The grant repository's own nonce connection (SQLite: synchronous NORMAL; PostgreSQL:
    synchronous_commit off) still makes a recorded nonce outlive the process that recorded it."""
    GrantRepository(store).close()
    first = _spawn("nonce", _url(store))
    assert first.stdout is not None and first.stdout.readline().strip() == "fresh"
    first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    repo = GrantRepository(type(store)(store.url) if isinstance(store, SQLiteStore) else store)
    try:
        assert repo.consume_nonce("did:key:zAlice", "once-only", 2**40, ["root"]) == "replay"
    finally:
        repo.close()


# --- approvals: a quorum reached by approvers voting at once ------------------------------------------


def test_two_approvers_voting_at_once_reach_a_quorum_of_two(store: Store) -> None:
    """On PostgreSQL (READ COMMITTED) each vote's count saw only its own uncommitted vote: with both
    votes in, neither approved the request, and it stayed pending for good (a repeated yes is
    refused as already given)."""
    import threading
    import time

    from agentgate.store.approvals import ApprovalStore

    approvals = ApprovalStore(store)
    for _trial in range(3):
        request = approvals.request("sha256:call", "did:key:zRequester", time.time() + 60, quorum=2)
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def vote(
            approver: str,
            request: str = request,
            start: threading.Barrier = start,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                start.wait(timeout=10)
                with store.transaction() as tx:
                    approvals.approve(request, approver, tx=tx)
                    time.sleep(0.05)  # both votes in flight at once
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=vote, args=(f"did:key:zApprover{k}",)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert approvals.get(request).state == "approved"
        assert len(approvals.approvers(request)) == 2


@pytest.mark.parametrize(
    "value", ["host=db.example dbname=agentgate user=agentgate", " dbname = agentgate", "service=prod"]
)
def test_a_libpq_connection_string_is_refused_not_taken_as_a_file_name(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """AGENTGATE_STORE='host=db dbname=agentgate' (the form psql takes) became a new SQLite file
    under ./host=/: ``agentgate grant revoke`` said "revoked" (exit 0) into that file, and every
    gateway on the real PostgreSQL store kept allowing the grant."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", value)
    with pytest.raises(StoreError, match="key=value connection string"):
        open_store()
    assert main(["grant", "revoke", "ab" * 32]) == 2
    assert "postgresql://" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["agentgate.db", "sub/dir=1/agentgate.db", "hosts.db", "x=1.db"])
def test_file_names_with_an_equals_sign_are_still_sqlite_files(name: str, tmp_path: Path) -> None:
    with open_store(str(tmp_path / name)) as store:
        assert isinstance(store, SQLiteStore)
    with open_store(f"sqlite:///{tmp_path / name}") as store:
        assert isinstance(store, SQLiteStore)


# --- PostgreSQL: a server whose default isolation is not READ COMMITTED -------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_decisions_run_at_read_committed_whatever_the_database_default(postgres_url: str, level: str) -> None:
    """docs/operations.md: agentgate runs transactions at READ COMMITTED. It took the server's
    default, and with ``ALTER DATABASE ... SET default_transaction_isolation`` to a stricter level
    most concurrent decisions failed ("could not serialize access"), each one a deny."""
    import threading

    from agentgate.store._postgres import PostgresStore

    with PostgresStore(postgres_url) as owner, owner.transaction() as tx:
        database = tx.execute("SELECT current_database()")[0][0]
        tx.execute(f"ALTER DATABASE {database} SET default_transaction_isolation = '{level}'")
    with PostgresStore(postgres_url, max_size=4) as store:
        log, ledger = AuditLog(store, KEY, origin=ORIGIN), BudgetLedger(store)
        errors: list[BaseException] = []

        def decide() -> None:
            for _ in range(10):
                try:
                    with store.transaction() as tx:
                        log.lock(tx)
                        ledger.reserve(tx, ["root"], {"root": 1_000}, 1)
                        log.append(decision(), tx)
                except BaseException as exc:  # reported below
                    errors.append(exc)

        threads = [threading.Thread(target=decide) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert log.size() == 40 and ledger.remaining("root") == 960 and log.verify().ok


# --- what held up: a cache made to agree with a tampered block, across a key rotation ------------------


def test_a_cache_that_agrees_with_a_tampered_block_never_proves_it_across_a_key_rotation(
    sqlite_store: SQLiteStore,
) -> None:
    """An entry of the first block rewritten with its leaf hash, and the cached block root
    recomputed to match (what a careful attacker with the database would do), under checkpoints
    signed by a rotated-out key and by the current one: explain and prove refuse it, verify names it."""
    import json

    from agentgate.audit.merkle import RootAccumulator, leaf_hash
    from agentgate.errors import TamperDetected
    from agentgate.keys import SigningKey

    def _root(leaves: list[bytes]) -> bytes:
        acc = RootAccumulator()
        for leaf in leaves:
            acc.add(leaf)
        return acc.root()

    old = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    allow, _outcome = _pair_after_a_block(old)  # checkpointed with KEY
    new_key = SigningKey(b"\x09" * 32)
    log = AuditLog(sqlite_store, new_key, origin=ORIGIN, previous_keys=[KEY.public])
    log.append(decision())
    log.checkpoint()  # the first checkpoint of the new key
    fields = json.loads(log.entry_bytes(5))
    fields["rule"] = "rewritten"
    forged = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    with sqlite_store.transaction() as tx:
        tx.execute("DROP TRIGGER audit_log_no_update")
        tx.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 5", (forged, leaf_hash(forged)))
        leaves = [
            bytes(r[0]) for r in tx.execute("SELECT leaf_hash FROM audit_log WHERE idx < 1024 ORDER BY idx")
        ]
        tx.execute("DELETE FROM audit_nodes")
        tx.execute("INSERT INTO audit_nodes (level, position, hash) VALUES (10, 0, ?)", (_root(leaves),))
    with pytest.raises(TamperDetected):
        log.explain(5)
    with pytest.raises(TamperDetected):
        log.explain(allow)  # its proof needs the block's root too
    with pytest.raises(TamperDetected):  # no bundle is made of it (review R36)
        log.prove(5, log.latest_checkpoint())
    report = log.verify()
    assert not report.ok and report.first_bad_index is not None and report.first_bad_index <= 5


def test_an_argument_key_that_is_not_unicode_with_a_value_that_is_not_json_is_an_input_error(
    sqlite_store: SQLiteStore,
) -> None:
    """AuditLog.append promises InputError for bad fields; this pair raised UnicodeEncodeError from
    inside pydantic (its error message could not be encoded), and nothing said which field."""
    from agentgate.audit.entry import AuditEntry
    from agentgate.errors import InputError

    fields = {"kind": "allow", "principal": "did:key:zA", "args": {"\ud800": b"raw"}}
    log = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    with pytest.raises(InputError, match="not valid Unicode"):
        log.append(fields)
    assert log.size() == 0
    with pytest.raises(InputError, match="not valid Unicode"):
        AuditEntry.build(**fields, index=0, time="2026-11-30T00:00:00.000000Z")


def test_a_checkpoint_note_that_is_not_utf8_is_reported_not_a_store_error(
    sqlite_store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint row whose note holds bytes that are not UTF-8 (SQLite keeps them in a TEXT
    column; the triggers allow any INSERT) made sqlite3 fail to read the table: verify raised
    StoreError (exit 2, "unusable input") instead of reporting a tampered log (exit 1), and
    checkpoint and explain failed the same way."""
    from agentgate.errors import TamperDetected

    log = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    log.append(decision())
    log.checkpoint()
    _sql(
        sqlite_store,
        "INSERT INTO audit_checkpoints (size, root, note, created) "
        "SELECT size, root, CAST(X'ff0a' AS TEXT), created FROM audit_checkpoints",
    )
    report = log.verify()
    assert not report.ok and any(p.startswith("checkpoint #2:") for p in report.problems), report.problems
    with pytest.raises(TamperDetected):
        log.checkpoint()
    assert len(log.checkpoints()) == 2
    save_key(KEY, tmp_path, "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    assert main(["audit", "verify", "--store", sqlite_store.url]) == 1


def test_a_note_with_a_lone_surrogate_is_tampering_not_a_unicode_error() -> None:
    from agentgate.audit.note import Checkpoint, open_checkpoint, sign_checkpoint
    from agentgate.errors import TamperDetected

    note = sign_checkpoint(Checkpoint(ORIGIN, 1, bytes(32)), KEY)
    for bad in (note.replace("\n\n", "\udcff\n\n"), "\udcff" + note):
        with pytest.raises(TamperDetected):
            open_checkpoint(bad, KEY.public, ORIGIN)
        with pytest.raises(TamperDetected):
            open_checkpoint(bad, KEY.public)
