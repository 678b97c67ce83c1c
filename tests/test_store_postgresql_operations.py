"""PostgreSQL in operation. docs/operations.md followed literally, as an operator, on
the real server of the ``postgres_server`` fixture: connection limits and an exhausted pool, the
least-privilege recipe, backup and restore with ``pg_dump``/``pg_restore``, and a Gate deciding
in threads while the server is stopped and started again."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_audit_reconciliation import _keys, _policy_text

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import AuditError, StoreError
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import _postgres as pg
from agentgate.store._pgserver import pg_binary
from agentgate.store._postgres import _PROBE_TIMEOUT_S, PostgresStore
from agentgate.store.audit import APPEND_LOCK, AuditLog
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres


def _role_url(url: str, server: Any, role: str) -> str:
    return url.replace(f"postgresql://{server.user}@", f"postgresql://{role}@")


@contextmanager
def _held(store: PostgresStore) -> Iterator[None]:
    """One of ``store``'s connections held in an open transaction by another thread."""
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transaction() as tx:
            tx.execute("SELECT 1")
            inside.set()
            done.wait(timeout=30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(timeout=30)
    try:
        yield
    finally:
        done.set()
        thread.join()


# --- a pool that gets no connection says why -----------------------------------------------------


def test_a_role_at_its_connection_limit_is_named_not_only_a_timeout(postgres_server: Any) -> None:
    """The pool's timeout was the whole message ("couldn't get a connection after 10.00 sec"):
    the branch meant to say more never ran (``PoolTimeout`` is a ``psycopg.Error``), and nothing
    said the server refused this role more connections."""
    url = postgres_server.create_database()
    role = "r30_" + uuid.uuid4().hex[:8]
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    with PostgresStore(_role_url(url, postgres_server, role), max_size=2) as app:
        app.pool.timeout = 0.5
        with _held(app), pytest.raises(StoreError) as raised, app.transaction() as tx:
            tx.execute("SELECT 1")
        assert "unreachable" in str(raised.value) and f'too many connections for role "{role}"' in str(
            raised.value
        )
        with app.transaction() as tx:  # the connection is back: the same store goes on
            assert tx.execute("SELECT 1") == [(1,)]


def test_a_pool_whose_connections_are_all_in_use_says_so(postgres_server: Any) -> None:
    with PostgresStore(postgres_server.create_database(), max_size=1) as store:
        store.pool.timeout = 0.5
        with (
            _held(store),
            pytest.raises(StoreError, match="all 1 connections of this process's pool stayed in use"),
        ):
            store.query("SELECT 1")


# --- the least-privilege recipe of docs/operations.md, followed literally -----------------------

DOCS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def _docs_grants(role: str) -> list[str]:
    """The SQL block of docs/operations.md that grants the application role its rights."""
    text = DOCS.read_text()
    start = text.index("```sql", text.index("grant the application role"))
    block = text[start + len("```sql") : text.index("```", start + 6)]
    return [s.strip().replace("agentgate_app", role) for s in block.split(";") if s.strip()]


def test_the_application_role_of_the_docs_runs_a_gate_but_cannot_undo_a_revocation(
    postgres_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe granted UPDATE and DELETE on every table but the audit log's: the application
    role (a compromised gateway, an injected statement) could delete a revocation row, and the
    revoked grant decided ``allow`` again. agentgate never updates or deletes grants or
    revocations, so the recipe now takes those rights back; the Gate runs the same."""
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    url = postgres_server.create_database()
    role = "r30_" + uuid.uuid4().hex[:8]
    assert main(["store", "init", "--store", url]) == 0
    assert main(["audit", "checkpoint", "--store", url]) == 0
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute(f"CREATE ROLE {role} LOGIN")
        tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        for statement in _docs_grants(role):
            tx.execute(statement)
    app = PostgresStore(_role_url(url, postgres_server, role))
    gate = Gate(parse_policy(_policy_text(), source="r30.yaml"), app)
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    allowed = gate.authorize(boss, Call.model("scripted"), tokens=(10, 10))
    assert gate.run(allowed, lambda: "hi", spent=lambda _: (3, 3)) == "hi"
    asked = gate.authorize(boss, Call.tool("transfer", {"to": "bob"}))
    approval = Approval.sign(asked.approval_payload(), keys["dana"])
    assert gate.authorize(boss, Call.tool("transfer", {"to": "bob"}), approval=approval).verdict == "allow"
    gate.revoke(boss, reason="r30")
    assert gate.authorize(boss, Call.tool("lookup", {"id": "1"})).verdict == "deny"
    assert gate.verify().ok
    gate.close()
    with PostgresStore(_role_url(url, postgres_server, role)) as attacker:
        for statement in (
            "DELETE FROM agentgate_revocations",
            "UPDATE agentgate_revocations SET grant_id = 'none'",
            "UPDATE agentgate_grants SET parent = NULL",
            "DELETE FROM audit_log",
            "UPDATE audit_checkpoints SET note = note",
            "DELETE FROM audit_checkpoints",
            "TRUNCATE audit_log",
            "DROP TABLE audit_log",
            "ALTER TABLE audit_log DISABLE TRIGGER ALL",
            "DELETE FROM audit_refs",
        ):
            with (
                pytest.raises(StoreError, match=r"permission denied|must be owner"),
                attacker.transaction() as tx,
            ):
                tx.execute(statement)
    with PostgresStore(url) as owner:
        gate = Gate(parse_policy(_policy_text(), source="r30.yaml"), owner)
        assert gate.authorize(boss, Call.tool("lookup", {"id": "2"})).verdict == "deny"
        gate.close()


# --- backup and restore as docs/operations.md says -----------------------------------------------


def _dbname(url: str) -> str:
    return url.split("@/", 1)[1].split("?", 1)[0]


def _pg(server: Any, tool: str, *args: str) -> None:
    binary = pg_binary(tool)
    assert binary is not None
    done = server.run(
        binary, "-h", str(server.socket_dir), "-p", str(server.port), "-U", server.user, *args, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_store_restored_with_pg_restore_verifies_and_forgets_only_what_came_after_the_backup(
    postgres_server: Any,
) -> None:
    """``pg_dump -Fc`` / ``pg_restore -d`` into an empty database: the restored log verifies on its
    own and, against the checkpoint saved after the backup, says it is an older copy. What the
    docs now say an operator must redo holds: a nonce recorded before the backup is still a replay,
    one recorded after it is fresh again (its invocation expires within 5 minutes), and a revocation
    made after it is gone until it is revoked again."""
    if pg_binary("pg_dump") is None or pg_binary("pg_restore") is None:
        pytest.skip("pg_dump/pg_restore not installed")
    url = postgres_server.create_database()
    key = SigningKey(b"\x30" * 32)
    with PostgresStore(url) as live:
        log, repo = AuditLog(live, key, origin="r30/audit"), GrantRepository(live)
        assert repo.consume_nonce("did:key:zA", "before", 2**40, ["g1"]) == "fresh"
        log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * 3)
        log.checkpoint()
        dump = postgres_server.root / f"{_dbname(url)}.dump"
        _pg(postgres_server, "pg_dump", "-Fc", "-f", str(dump), _dbname(url))
        assert repo.revoke("g2", now=1, reason="after the backup")
        assert repo.consume_nonce("did:key:zA", "after", 2**40, ["g1"]) == "fresh"
        log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * 2)
        saved = log.checkpoint()
        repo.close()
    restored_url = postgres_server.create_database()
    _pg(postgres_server, "pg_restore", "-d", _dbname(restored_url), str(dump))
    with PostgresStore(restored_url) as restored:
        log, repo = AuditLog(restored, key, origin="r30/audit"), GrantRepository(restored)
        assert log.size() == 3 and log.verify().ok
        report = log.verify(saved)
        assert not report.ok and report.first_bad_index == 3
        assert any("older copy" in problem for problem in report.problems)
        assert repo.consume_nonce("did:key:zA", "before", 2**40, ["g1"]) == "replay"
        assert repo.consume_nonce("did:key:zA", "after", 2**40, ["g1"]) == "fresh"
        assert repo.consume_nonce("did:key:zA", "x1", 2**40, ["g2"]) == "fresh"
        assert repo.revoke("g2", now=2, reason="again, after the restore")
        assert repo.consume_nonce("did:key:zA", "x2", 2**40, ["g2"]) == "revoked"
        assert log.append({"kind": "allow", "principal": "did:key:zA"}) == 3  # the restored triggers hold
        repo.close()


# --- a Gate deciding in threads while the server stops and starts again -------------------------


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_gate_deciding_in_threads_fails_closed_across_a_restart_and_decides_again(
    postgres_server: Any, mode: str
) -> None:
    """Four threads authorize and run calls (a model call charged 2 each) while the server is
    stopped (``pg_ctl stop -m fast|immediate``) and started again: every failure is a typed
    ``StoreError`` or ``AuditError``, no decision waits past twice the pool's timeout (its own
    wait and the one ahead of it), every call that ran was allowed and has its outcome, the
    ledger's spend is what the outcomes charged, and the same Gate, not rebuilt, decides again."""
    store = PostgresStore(postgres_server.create_database())
    gate = Gate(parse_policy(_policy_text(), source="r30.yaml"), store)
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    ran: list[int] = []
    allowed: list[int] = []
    failures: list[BaseException] = []
    slowest = [0.0]
    stop = threading.Event()
    lock = threading.Lock()

    def decide(me: int) -> None:
        turn = 0
        while not stop.is_set():
            turn += 1
            began = time.monotonic()
            try:
                auth = gate.authorize(boss, Call.model("scripted", {"n": f"{me}-{turn}"}), tokens=(1, 1))
                assert auth.verdict == "allow", auth.reasons
                with lock:
                    allowed.append(1)
                gate.run(auth, lambda: ran.append(1), spent=lambda _: (1, 1))
            except (StoreError, AuditError) as exc:  # anything else fails the thread, and the test
                with lock:
                    failures.append(exc)
            with lock:
                slowest[0] = max(slowest[0], time.monotonic() - began)
            if turn >= 100:  # 4 x 100 calls charged 2 each stay within the budget of 1000
                return

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    while len(ran) < 20:
        time.sleep(0.01)
    postgres_server.stop(mode)
    try:
        time.sleep(0.5)
    finally:
        postgres_server.start()
    back = len(ran)
    while len(ran) < back + 20 and any(thread.is_alive() for thread in threads):
        time.sleep(0.01)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    # Decisions run one at a time (the gate's store lock): one that waits for the store can have
    # waited first for the decision ahead of it, itself waiting up to the pool's timeout. The
    # server is back within a fraction of that timeout, so no decision waits longer than two.
    # Each wait that runs out is followed by one direct probe of the server (``_no_connection``,
    # up to ``_PROBE_TIMEOUT_S``) that says why. (One timeout plus 5 s failed once under the
    # parallel suite: 15.2 s; two timeouts plus 5 s once, in R37: 25.4 s, both probes included;
    # 53.4 s once, in R41's clean-clone CI while a dependency matrix loaded both cores.) What this
    # guards is a decision that waits without bound (one per waiter ahead of it would be 20 pool
    # timeouts here), not the machine's speed: four rounds of timeout and probe, and 30 s of load.
    assert slowest[0] < 4 * (store.pool.timeout + _PROBE_TIMEOUT_S) + 30
    gate.flush()
    entries = list(gate.audit.entries())
    allows = sum(1 for e in entries if e.kind == "allow" and e.resource == "model:scripted")
    outcomes = [e for e in entries if e.kind == "outcome"]
    # An allow whose commit's answer the server never sent is in the log, refused to its caller;
    # since review R69 it is read back once the server is back and settled as not run, its
    # reservation released (this test counted it as held, with no outcome, and failed in the
    # clean-clone CI of fa5d6c5 when the stop landed between a commit and its answer: 52 calls
    # run, 53 outcomes).
    assert len(allowed) <= allows <= len(allowed) + len(failures)
    lost = [e for e in outcomes if any("not acknowledged" in r and "not run" in r for r in e.reasons)]
    assert len(ran) == len(allowed) == len(outcomes) - len(lost)
    assert len(lost) == allows - len(allowed)
    # The ledger's spend is what the outcomes charged; nothing stays held.
    spent, limit = gate.budget_usage(boss)[boss.grant_id]
    assert spent == 2 * len(ran)
    remaining = gate.ledger.remaining(boss.grant_id)
    assert remaining is not None  # the grant has been charged
    assert limit - remaining - spent == 0
    assert gate.authorize(boss, Call.tool("lookup", {"id": "after"})).verdict == "allow"
    assert gate.verify().ok
    gate.close()


# --- connections the server closes while they sit idle ------------------------------------------


def test_a_gate_decides_after_a_quiet_spell_longer_than_the_servers_idle_session_timeout(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``idle_session_timeout`` (or a proxy, a firewall, a load balancer) closes the pool's idle
    connections: the first decision after every quiet spell failed ("terminating connection due
    to idle-session timeout", a deny), and so did an outcome's background commit (dropped). A
    connection idle for more than ``IDLE_CHECK_S`` (0.4 s here) is now tested before it is used."""
    monkeypatch.setattr(pg, "IDLE_CHECK_S", 0.4)
    url = postgres_server.create_database()
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute(f"ALTER DATABASE {_dbname(url)} SET idle_session_timeout = '300ms'")
    store = PostgresStore(url)
    gate = Gate(parse_policy(_policy_text(), source="r30.yaml"), store)
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    for turn in range(3):
        time.sleep(0.7)  # every pooled connection is closed by the server meanwhile
        auth = gate.authorize(boss, Call.model("scripted", {"turn": turn}), tokens=(1, 1))
        assert auth.verdict == "allow", auth.reasons
        assert gate.run(auth, lambda: "hi", spent=lambda _: (1, 1)) == "hi"
    time.sleep(0.7)
    gate.flush()
    assert sum(1 for e in gate.audit.entries() if e.kind == "outcome") == 3
    gate.close()


# --- a writer that stops while it holds the append lock ------------------------------------------


def test_a_decision_waits_for_a_frozen_writers_append_lock_only_up_to_the_lock_timeout(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that stops while it holds the audit append lock (SIGSTOP, a long GC pause, a
    network partition that leaves its session open): every decision of every other process
    waited for it without end, with no lock timeout on the connections. Now a wait for a lock
    ends after ``LOCK_TIMEOUT_S`` (unless the server, role or database sets its own) in a typed
    error naming it, and the next decision after the writer is gone goes through."""
    monkeypatch.setattr(pg, "LOCK_TIMEOUT_S", 0.5)
    url = postgres_server.create_database()
    key = SigningKey(b"\x31" * 32)
    frozen, decider = PostgresStore(url), PostgresStore(url)
    log = AuditLog(decider, key, origin="r30/audit")
    AuditLog(frozen, key, origin="r30/audit")
    released = threading.Event()
    holding = threading.Event()

    def freeze() -> None:
        with frozen.transaction() as tx:
            tx.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
            holding.set()
            released.wait(timeout=120)  # a decision with no lock timeout would wait this long

    thread = threading.Thread(target=freeze)
    thread.start()
    try:
        assert holding.wait(timeout=30)
        began = time.monotonic()
        with pytest.raises((AuditError, StoreError), match="lock timeout"):
            log.append({"kind": "allow", "principal": "did:key:zA"})
        # The 0.5 s set above, not the default's 10 s (nor no limit, 120 s here).
        assert time.monotonic() - began < 5
    finally:
        released.set()
        thread.join()
    assert log.append({"kind": "allow", "principal": "did:key:zA"}) == 0
    frozen.close()
    decider.close()
