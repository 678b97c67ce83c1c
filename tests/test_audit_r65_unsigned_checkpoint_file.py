"""Review R65: a checkpoint file holding the checkpoint's body without its signature (three
lines copied without the blank line and signature line after them) is refused naming that,
not as a body of fewer than three lines (agentgate/cli/audit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x6a" * 32)
ORIGIN = "r65.example/audit"
UNSIGNED = "not a checkpoint: it holds no signature (no blank line and signature line after its body)"


@pytest.fixture
def body_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A log of 3 entries with a checkpoint, and a file holding only that checkpoint's body."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        for i in range(3):
            log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
        note = log.checkpoint()
    (tmp_path / "log.pub").write_text(KEY.public.did + "\n")
    saved = tmp_path / "body.checkpoint"
    saved.write_text(note.split("\n\n")[0] + "\n")
    return saved


def test_verify_names_a_checkpoint_file_without_its_signature(
    body_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R65: ``audit verify --checkpoint FILE`` of the body alone said ``checkpoint body must
    be at least three non-empty lines ending in newline``, which it is. Rule: exit 2, saying the
    signature is missing."""
    pub = body_only.parent / "log.pub"
    capsys.readouterr()
    assert main(["audit", "verify", "--key", str(pub), "--checkpoint", str(body_only)]) == 2
    assert capsys.readouterr().err == f"agentgate: error: {body_only}: {UNSIGNED}\n"
