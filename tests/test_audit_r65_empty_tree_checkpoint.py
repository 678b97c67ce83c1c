"""Review R65: a checkpoint of size 0 signs the empty tree, whose root is SHA-256 of no bytes;
``verify`` checks that root as it checks the root at every other size
(agentgate/store/audit/_verify.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.audit.merkle import EMPTY_ROOT
from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x66" * 32)
ORIGIN = "r65.example/audit"
WRONG = "checkpoint of size 0: root does not match the entries; the empty tree's root is SHA-256 of no bytes"


def _log(store: Store, n: int) -> AuditLog:
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(n):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "resource": "tool:t", "budget_delta": i})
    return log


def _empty_tree(root: bytes) -> str:
    return sign_checkpoint(Checkpoint(ORIGIN, 0, root), KEY)


@pytest.mark.parametrize("entries", [0, 7])
def test_a_stored_checkpoint_of_size_0_with_another_root_is_reported(store: Store, entries: int) -> None:
    """Review R65: a stored checkpoint of size 0 signed over a root that is not the empty tree's
    verified as intact (no entry is read before size 0, so its root was never compared), while
    ``checkpoint`` refused to build on it. Rule: ``verify`` names it, as at any other size."""
    log = _log(store, entries)
    note = _empty_tree(b"\x11" * 32)
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (0, ?, ?, ?)",
            (b"\x11" * 32, note, "2026-12-04T00:00:00.000000Z"),
        )
    report = log.verify()
    assert not report.ok
    assert report.problems == (WRONG,)


def test_a_saved_checkpoint_of_size_0_with_another_root_is_reported(tmp_path: Path) -> None:
    """Review R65: the same for a checkpoint saved outside the database (``--checkpoint``)."""
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = _log(store, 3)
        assert log.verify(_empty_tree(EMPTY_ROOT)).ok
        report = log.verify(_empty_tree(b"\x22" * 32))
        assert report.problems == (WRONG,)


def test_audit_verify_says_tampered_for_a_saved_empty_tree_with_another_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R65: ``agentgate audit verify --checkpoint FILE`` of such a checkpoint exits 1 naming
    it (it said ``intact``, exit 0)."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        _log(store, 3)
    pub = tmp_path / "log.pub"
    pub.write_text(KEY.public.did + "\n")
    saved = tmp_path / "empty.checkpoint"
    saved.write_text(_empty_tree(b"\x33" * 32))
    capsys.readouterr()
    assert main(["audit", "verify", "--store", str(db), "--key", str(pub), "--checkpoint", str(saved)]) == 1
    assert capsys.readouterr().out.splitlines() == ["TAMPERED: 1 problem(s)", f"  - {WRONG}"]
