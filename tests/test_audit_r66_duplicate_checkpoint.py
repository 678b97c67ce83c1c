"""Review R66: a checkpoint row stored twice (the same signed note, size and root) was asked about:
``audit verify`` says nothing of it. Decided that is right: the row claims nothing the log key
did not sign, and the log writes such rows itself when two ``audit checkpoint`` runs at one size
race (Ed25519 signatures are deterministic, so both store the same note). These tests hold that
decision (docs/audit-format.md, the table of what verify detects)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from test_audit_r66_checkpoint_lines import ORIGIN, allows, audit_cli_on

from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x68" * 32)


def _log(path: Path, n: int) -> None:
    with SQLiteStore(path) as store:
        allows(AuditLog(store, KEY, ORIGIN), n)


def _checkpoint_when_both_are_ready(path: str, ready: multiprocessing.synchronize.Barrier) -> None:
    with SQLiteStore(path) as store:
        log = AuditLog(store, KEY, ORIGIN)
        ready.wait()
        log.checkpoint()


def test_two_checkpoint_runs_at_one_size_store_only_the_same_note(tmp_path: Path) -> None:
    """Review R66: the log itself may store a checkpoint twice. Two processes checkpoint a log of
    one size at once: whether one row or two is stored, every row holds the same signed note, and
    the log verifies intact, every row counted."""
    path = tmp_path / "agentgate.db"
    _log(path, 500)
    ready = multiprocessing.get_context("spawn").Barrier(2)
    workers = [
        multiprocessing.get_context("spawn").Process(
            target=_checkpoint_when_both_are_ready, args=(str(path), ready)
        )
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    with SQLiteStore(path) as store:
        notes = [row[0] for row in store.query("SELECT note FROM audit_checkpoints")]
        assert 1 <= len(notes) <= 2 and len(set(notes)) == 1
        report = AuditLog(store, KEY, ORIGIN).verify()
    assert report.ok and report.checkpoints_checked == len(notes)


@pytest.fixture
def copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A log of 5 entries whose one checkpoint row was copied (an INSERT the triggers allow)."""
    audit_cli_on(tmp_path, monkeypatch)
    _log(tmp_path / "agentgate.db", 5)
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        AuditLog(store, KEY, ORIGIN).checkpoint()
        with store.transaction() as tx:
            tx.execute(
                "INSERT INTO audit_checkpoints (size, root, note, created) "
                "SELECT size, root, note, created FROM audit_checkpoints"
            )
    save_key(KEY, tmp_path, "log")
    return tmp_path


def test_a_copied_checkpoint_row_verifies_and_the_log_builds_on_it(
    copied: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: a copied checkpoint row verifies intact (both rows counted), and checkpoint,
    explain and prove work on the log as before."""
    capsys.readouterr()
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.endswith(", 2 checkpoints\n")
    with SQLiteStore(copied / "agentgate.db") as store:
        AuditLog(store, KEY, ORIGIN).append({"kind": "deny", "principal": "did:key:zBob"})
    assert main(["audit", "checkpoint"]) == 0
    assert main(["audit", "explain", "5"]) == 0
    assert main(["audit", "prove", "2", "--out", "p"]) == 0
    capsys.readouterr()
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.startswith("intact: 6 entries, root ")
