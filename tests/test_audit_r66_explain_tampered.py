"""Review R66: ``audit explain`` of an entry the log shows was tampered with (edited in the
database, leaf hash and all) exits 1 with a ``REFUSED: ...`` line, as ``audit prove`` and
``audit verify`` do for tampering; exit 2 stays for input it cannot use (agentgate/cli/audit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_r66_checkpoint_lines import ORIGIN, allows, audit_cli_on

from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import leaf_hash
from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x67" * 32)


@pytest.fixture
def tampered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A log of 4 entries with a checkpoint, whose entry 2 was then edited past the triggers with
    its leaf hash rewritten to match (only the signed checkpoint can tell)."""
    audit_cli_on(tmp_path, monkeypatch)
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        allows(log, 4)
        log.checkpoint()
        edited = AuditEntry.from_bytes(log.entry_bytes(2)).model_copy(update={"kind": "deny"}).to_bytes()
        with store.transaction() as tx:
            tx.execute("DROP TRIGGER audit_log_no_update")
            tx.execute(
                "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 2", (edited, leaf_hash(edited))
            )
            tx.execute(
                "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
                "BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END"
            )
    save_key(KEY, tmp_path, "log")  # log.key (prove signs with it) and log.pub
    return tmp_path


def test_explain_of_a_tampered_entry_exits_1_as_the_other_audit_verbs(
    tampered: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: ``explain`` of an entry edited in the database exited 2 with ``agentgate:
    error: ...``, the code docs/cli.md keeps for unusable input, where ``verify`` and ``prove``
    exit 1 for the same log (tampering found). Rule: exit 1, one ``REFUSED: ...`` line on
    standard output naming the entry and sending the reader to ``audit verify``, nothing else."""
    capsys.readouterr()
    assert main(["audit", "verify", "--key", "log.pub"]) == 1
    assert main(["audit", "prove", "2", "--out", "p"]) == 1
    capsys.readouterr()
    assert main(["audit", "explain", "2", "--key", "log.pub"]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith("REFUSED: ") and out.count("\n") == 1
    assert "entry 2" in out
    assert out.endswith("; nothing explained, run agentgate audit verify\n")


def test_explain_of_an_entry_past_the_end_is_still_unusable_input(
    tampered: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: the change keeps exit 2 for an index the log does not hold."""
    capsys.readouterr()
    assert main(["audit", "explain", "9", "--key", "log.pub"]) == 2
    assert "entry 9 is past its end" in capsys.readouterr().err
