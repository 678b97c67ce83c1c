"""The audit log on both stores: appends, append-only enforcement, checkpoints and proofs."""

from __future__ import annotations

import base64
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from agentgate.audit.entry import AuditEntry, argument_digest, redact
from agentgate.audit.merkle import verify_consistency
from agentgate.audit.note import Checkpoint, open_checkpoint
from agentgate.audit.proof import verify_bundle
from agentgate.errors import InputError, StoreError, TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, log_key_path, open_log_key

ALICE = SigningKey(b"\x01" * 32).did
# What a refused statement raises: SQLite's own error inside the transaction, StoreError on PostgreSQL.
REFUSED = (StoreError, sqlite3.Error)


def decision(n: int, kind: str = "allow") -> dict[str, object]:
    args = {"amount": n, "card": "4111-1111-1111-1111"}
    return {
        "kind": kind,
        "principal": ALICE,
        "chain_hash": "sha256:" + "ab" * 32,
        "policy_hash": "sha256:" + "cd" * 32,
        "rule": "refunds-small",
        "resource": "tool:payments.refund",
        "args_digest": argument_digest(args),
        "args": redact(args, ["amount"]),
        "budget_delta": n,
        "reasons": ["capability covers call"],
    }


@pytest.fixture
def log(store: Store) -> AuditLog:
    return AuditLog(store, SigningKey(b"\x07" * 32), origin="test.example/audit")


def test_appends_get_gap_free_indexes_and_verify(log: AuditLog) -> None:
    assert [log.append(decision(i)) for i in range(5)] == [0, 1, 2, 3, 4]
    report = log.verify()
    assert report.ok and report.size == 5 and report.first_bad_index is None
    assert log.entry(3).budget_delta == 3


def test_secrets_are_stored_only_as_a_digest(log: AuditLog, store: Store) -> None:
    log.append(decision(1))
    raw = bytes(store.query("SELECT entry FROM audit_log")[0][0])
    assert b"4111" not in raw
    assert log.entry(0).args == {"amount": 1}


def test_database_refuses_update_and_delete(log: AuditLog, store: Store) -> None:
    log.append(decision(1))
    log.checkpoint()
    for statement in (
        "UPDATE audit_log SET entry = entry",
        "DELETE FROM audit_log",
        "UPDATE audit_checkpoints SET size = 9",
        "DELETE FROM audit_checkpoints",
    ):
        with pytest.raises(REFUSED) as caught, store.transaction() as tx:
            tx.execute(statement)
        assert "append-only" in str(caught.value)
    assert log.verify().ok


def test_database_refuses_an_index_that_is_not_the_next(log: AuditLog, store: Store) -> None:
    log.append(decision(1))
    with pytest.raises(REFUSED) as caught, store.transaction() as tx:
        tx.execute("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (5, b"x", b"\x00" * 32))
    assert "next" in str(caught.value)


def test_entry_commits_with_the_callers_transaction(log: AuditLog, store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction() as tx:
        log.append(decision(1), tx=tx)
        raise RuntimeError("the budget change failed")
    assert log.size() == 0
    with store.transaction() as tx:
        assert log.append(decision(2), tx=tx) == 0
    assert log.size() == 1


def test_bad_fields_write_nothing(log: AuditLog) -> None:
    with pytest.raises(InputError):
        log.append({**decision(1), "kind": "maybe"})
    with pytest.raises(InputError):
        log.append({**decision(1), "index": 7})
    assert log.size() == 0


def test_checkpoint_is_a_signed_note_over_the_tree(log: AuditLog) -> None:
    for i in range(3):
        log.append(decision(i))
    note = log.checkpoint()
    lines = note.split("\n")
    assert lines[0] == "test.example/audit" and lines[1] == "3" and lines[3] == ""
    assert lines[4].startswith("\u2014 test.example/audit ")
    checkpoint = open_checkpoint(note, log.public_key)
    assert checkpoint == Checkpoint("test.example/audit", 3, log.verify().root)
    assert log.checkpoint() == note  # nothing new: no second checkpoint
    with pytest.raises(TamperDetected):
        open_checkpoint(note.replace("\n3\n", "\n4\n"), log.public_key)
    with pytest.raises(TamperDetected):
        open_checkpoint(note, SigningKey(b"\x08" * 32).public)


def test_proof_bundle_verifies_offline_with_only_the_public_key(log: AuditLog) -> None:
    for i in range(11):
        log.append(decision(i, "deny" if i == 6 else "allow"))
    bundle = log.prove(6).text()
    assert bundle.startswith("c2sp.org/tlog-proof@v1\nextra ")
    entry, checkpoint = verify_bundle(bundle, log.public_key)
    assert entry.kind == "deny" and entry.index == 6 and checkpoint.size == 11
    forged = AuditEntry.from_bytes(log.entry_bytes(6)).model_copy(update={"kind": "allow"}).to_bytes()
    tampered = bundle.replace(
        base64.b64encode(log.entry_bytes(6)).decode(), base64.b64encode(forged).decode()
    )
    with pytest.raises(TamperDetected):
        verify_bundle(tampered, log.public_key)
    with pytest.raises(TamperDetected):
        verify_bundle(bundle, SigningKey(b"\x09" * 32).public)


def test_consistency_between_checkpoints(log: AuditLog) -> None:
    for i in range(5):
        log.append(decision(i))
    old = open_checkpoint(log.checkpoint(), log.public_key)
    for i in range(5, 13):
        log.append(decision(i))
    new = open_checkpoint(log.checkpoint(), log.public_key)
    verify_consistency(old.size, new.size, log.consistency(old.size, new.size), old.root, new.root)


def test_log_key_is_created_once_with_mode_0600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    store = SQLiteStore(tmp_path / "db" / "agentgate.db")
    key = open_log_key(store)
    path = log_key_path(store)
    assert path == tmp_path / "db" / "log.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert (tmp_path / "db" / "log.pub").read_text().strip() == key.did
    assert open_log_key(store) == key
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "elsewhere" / "mylog.key"))
    assert open_log_key(store) != key
    store.close()


def test_checkpoints_of_a_rotated_out_key_still_verify(store: Store) -> None:
    old_key, new_key = SigningKey(b"\x07" * 32), SigningKey(b"\x08" * 32)
    log = AuditLog(store, old_key, origin="test.example/audit")
    log.append(decision(1))
    log.checkpoint()
    rotated = AuditLog(store, new_key, origin="test.example/audit")
    rotated.append(decision(2))
    assert not rotated.verify().ok  # the old checkpoint is not trusted without its key
    with pytest.raises(TamperDetected, match="no signature by the log key"):
        rotated.checkpoint()  # nor signed over: a new checkpoint builds on a trusted one only
    trusted = AuditLog(store, new_key, origin="test.example/audit", previous_keys=[old_key.public])
    trusted.checkpoint()
    report = trusted.verify()
    assert report.ok and report.checkpoints_checked == 2


def test_concurrent_appends_get_distinct_gap_free_indexes(store: Store) -> None:
    import threading

    log = AuditLog(store, SigningKey(b"\x07" * 32), origin="test.example/audit")
    got: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for i in range(10):
            index = log.append(decision(i))
            with lock:
                got.append(index)

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(60))
    assert log.verify().ok


def test_no_entry_no_spend_the_reservation_rolls_back_with_a_failed_append(
    log: AuditLog, store: Store
) -> None:
    from agentgate.store.ledger import BudgetLedger

    ledger = BudgetLedger(store)
    with pytest.raises(InputError), store.transaction() as tx:
        ledger.reserve(tx, ["root"], {"root": 100}, 40)
        log.append({**decision(1), "principal": ""}, tx=tx)  # the entry cannot be written
    assert ledger.remaining("root") is None and log.size() == 0
    with store.transaction() as tx:
        ledger.reserve(tx, ["root"], {"root": 100}, 40)
        log.append(decision(40), tx=tx)
    assert ledger.remaining("root") == 60 and log.size() == 1


def test_group_append_is_all_or_nothing(log: AuditLog) -> None:
    log.append(decision(0))
    assert log.append_many([decision(1), decision(2), decision(3)]) == [1, 2, 3]
    with pytest.raises(InputError):
        log.append_many([decision(4), {**decision(5), "kind": "perhaps"}])
    assert log.size() == 4 and log.verify().ok
    assert [e.budget_delta for e in log.entries()] == [0, 1, 2, 3]


@pytest.mark.postgres
def test_a_select_insert_only_role_can_log_but_not_bypass_the_triggers(
    postgres_server: Any, postgres_url: str
) -> None:
    from agentgate.store._postgres import PostgresStore
    from agentgate.store.approvals import ApprovalStore
    from agentgate.store.ledger import BudgetLedger

    with PostgresStore(postgres_url) as owner:
        AuditLog(owner, SigningKey(b"\x07" * 32), origin="test.example/audit").append(decision(0))
        BudgetLedger(owner)
        ApprovalStore(owner)
        with owner.transaction() as tx:
            tx.execute(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ag_app') "
                "THEN CREATE ROLE ag_app LOGIN; END IF; END $$"
            )
            tx.execute("GRANT SELECT, INSERT ON audit_log, audit_checkpoints TO ag_app")
            tx.execute(
                "GRANT SELECT, INSERT, UPDATE ON budget_ledger, budget_reservations, approvals TO ag_app"
            )
    app_url = postgres_url.replace(f"postgresql://{postgres_server.user}@", "postgresql://ag_app@")
    with PostgresStore(app_url) as app:
        log = AuditLog(app, SigningKey(b"\x07" * 32), origin="test.example/audit")
        assert log.append(decision(1)) == 1
        log.checkpoint()
        for statement in (
            "ALTER TABLE audit_log DISABLE TRIGGER USER",
            "UPDATE audit_log SET entry = entry",
            "TRUNCATE audit_log",
        ):
            with pytest.raises(StoreError), app.transaction() as tx:
                tx.execute(statement)
        assert log.verify().ok and log.size() == 2
        ledger = BudgetLedger(app)
        ledger.commit(ledger.reserve(None, ["g"], {"g": 10}, 4), 3)
        assert ledger.remaining("g") == 7
        ApprovalStore(app).request("call", "did:key:zA", 1e12)
