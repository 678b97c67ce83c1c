"""Tampering with the audit log, as an attacker with write access to the database would, is detected.

The attacker first removes the append-only triggers (as anyone with the database owner's rights
can), then edits, deletes, inserts or reorders rows. ``verify`` must report each one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import leaf_hash
from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x07" * 32)
ORIGIN = "test.example/audit"
TRIGGERS = (
    "audit_log_next_index",
    "audit_log_no_update",
    "audit_log_no_delete",
    "audit_checkpoints_no_update",
    "audit_checkpoints_no_delete",
)


def _fill(store: Store, n: int = 10) -> AuditLog:
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(n):
        log.append(
            {"kind": "deny" if i % 3 == 0 else "allow", "principal": "did:key:zAlice", "budget_delta": i}
        )
    return log


def _attack(store: Store, *statements: tuple[str, tuple[object, ...]]) -> None:
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            for name in TRIGGERS:
                tx.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
            tx.execute("ALTER TABLE audit_checkpoints DISABLE TRIGGER USER")
        for sql, params in statements:
            tx.execute(sql, params)


def _row(store: Store, idx: int) -> tuple[bytes, bytes]:
    data, stored = store.query("SELECT entry, leaf_hash FROM audit_log WHERE idx = ?", (idx,))[0]
    return bytes(data), bytes(stored)


def _flip_decision(data: bytes) -> bytes:
    entry = AuditEntry.from_bytes(data)
    return entry.model_copy(update={"kind": "allow" if entry.kind == "deny" else "deny"}).to_bytes()


def test_untouched_log_verifies(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    assert log.verify().ok


def test_decision_field_edited_is_named(store: Store) -> None:
    log = _fill(store)
    data, _ = _row(store, 6)
    _attack(store, ("UPDATE audit_log SET entry = ? WHERE idx = 6", (_flip_decision(data),)))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 6
    assert "entry 6" in report.problems[0]


def test_decision_edited_with_rehashed_leaf_is_caught_by_the_checkpoint(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    forged = _flip_decision(_row(store, 4)[0])
    _attack(
        store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (forged, leaf_hash(forged)))
    )
    report = log.verify()
    assert not report.ok and report.first_bad_index is not None and report.first_bad_index <= 4
    assert "checkpoint of size 10" in report.problems[0]


def test_deleted_middle_entry_is_named(store: Store) -> None:
    log = _fill(store)
    _attack(store, ("DELETE FROM audit_log WHERE idx = 3", ()))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 3


def test_deleted_last_entries_are_caught_by_a_stored_checkpoint(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx >= 8", ()))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 8


def test_deleted_last_entries_and_checkpoints_are_caught_by_a_saved_checkpoint(store: Store) -> None:
    log = _fill(store)
    saved = log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx >= 7", ()), ("DELETE FROM audit_checkpoints", ()))
    assert log.verify().ok  # nothing inside the database can tell
    report = log.verify(saved_checkpoint=saved)
    assert not report.ok and report.first_bad_index == 7
    assert "older copy" in report.problems[0]


def test_inserted_entry_is_named(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    # Shift entries 5.. up by one and slip a forged entry in at 5, leaf hashes and all.
    rows = store.query("SELECT idx, entry, leaf_hash FROM audit_log WHERE idx >= 5 ORDER BY idx DESC")
    forged = AuditEntry.build(
        index=5,
        time=AuditEntry.from_bytes(_row(store, 5)[0]).time,
        kind="allow",
        principal="did:key:zMallory",
    ).to_bytes()
    statements = [("DELETE FROM audit_log WHERE idx >= 5", ())]
    for idx, data, stored in rows:
        statements.append(
            ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (idx + 1, data, stored))
        )
    statements.append(
        ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (5, forged, leaf_hash(forged)))
    )
    _attack(store, *statements)
    report = log.verify()
    assert not report.ok and report.first_bad_index == 6
    assert any("inserted or reordered" in p for p in report.problems)


def test_reordered_entries_are_named(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    (a, ha), (b, hb) = _row(store, 2), _row(store, 5)
    _attack(
        store,
        ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 2", (b, hb)),
        ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 5", (a, ha)),
    )
    report = log.verify()
    assert not report.ok and report.first_bad_index == 2


def test_two_checkpoints_of_one_size_with_different_roots_are_a_fork(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    other = sign_checkpoint(Checkpoint(ORIGIN, 10, b"\x42" * 32), KEY)
    with store.transaction() as tx:  # inserting is allowed by the triggers; only the content is wrong
        tx.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
            (10, b"\x42" * 32, other, "2026-01-01T00:00:00.000000Z"),
        )
    report = log.verify()
    assert not report.ok
    assert any("different roots" in p for p in report.problems)


def test_forged_checkpoint_signature_is_reported(store: Store) -> None:
    log = _fill(store)
    root = log.verify().root
    forged = sign_checkpoint(Checkpoint(ORIGIN, 10, root), SigningKey(b"\x66" * 32))
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
            (10, root, forged, "2026-01-01T00:00:00.000000Z"),
        )
    report = log.verify()
    assert not report.ok and "signature" in report.problems[0]


def test_database_restored_from_an_older_copy_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "agentgate.db"
    store = SQLiteStore(path)
    log = _fill(store, 6)
    backup = tmp_path / "old.db"
    with sqlite3.connect(backup) as copy:
        sqlite3.connect(path).backup(copy)
    for i in range(4):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    saved = log.checkpoint()
    store.close()
    backup.replace(path)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    restored = SQLiteStore(path)
    log = AuditLog(restored, KEY, ORIGIN)
    report = log.verify(saved_checkpoint=saved)
    assert not report.ok and report.first_bad_index == 6
    restored.close()


def test_cli_verify_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only this group: the other verb groups are not what this test is about.
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    db = tmp_path / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    store = SQLiteStore(db)
    from agentgate.store.audit import open_log_key

    log = AuditLog(store, open_log_key(store), ORIGIN)
    for i in range(4):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
    saved = tmp_path / "cp.txt"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    assert main(["audit", "verify", "--checkpoint", str(saved)]) == 0
    data, _ = _row(store, 2)
    _attack(store, ("UPDATE audit_log SET entry = ? WHERE idx = 2", (_flip_decision(data),)))
    capsys.readouterr()
    assert main(["audit", "verify"]) == 1
    assert "first bad index: 2" in capsys.readouterr().out
    (tmp_path / "garbage.txt").write_text("not a checkpoint")
    assert main(["audit", "verify", "--checkpoint", str(tmp_path / "garbage.txt")]) == 2
    store.close()


def test_checkpoint_refuses_to_sign_a_tampered_log(store: Store) -> None:
    log = _fill(store)
    log.checkpoint()
    forged = _flip_decision(_row(store, 4)[0])
    _attack(
        store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (forged, leaf_hash(forged)))
    )
    log.append({"kind": "allow", "principal": "did:key:zAlice"})
    with pytest.raises(TamperDetected, match="no longer match"):
        log.checkpoint()
    _attack(store, ("UPDATE audit_log SET entry = ? WHERE idx = 10", (b'{"forged":1}',)))
    with pytest.raises(TamperDetected):
        log.checkpoint()
