"""Proof bundles, checkpoints and the audit verbs read by an auditor who has
only docs/audit-format.md, docs/cli.md and the log's public key.

Each test failed on the code before its fix; its docstring says what was wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_cli import audit_cli_store

from agentgate.audit.proof import verify_bundle
from agentgate.audit.report import render_report
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

KEY = SigningKey(b"\x24" * 32)
ORIGIN = "r36.example/audit"
TRIGGERS = ("audit_log_no_update", "audit_log_no_delete")


def _fill(log: AuditLog, n: int) -> None:
    for i in range(n):
        log.append({"kind": "allow", "principal": f"did:key:zAgent{i % 2}", "resource": "tool:search"})


def _edit_entry(store: Store, index: int, old: bytes, new: bytes) -> None:
    """Rewrite entry ``index``'s bytes in the database, its stored leaf hash left as it was."""
    with store.transaction() as tx:
        for name in TRIGGERS:
            tx.execute(f"DROP TRIGGER IF EXISTS {name}")
        data = bytes(store.query("SELECT entry FROM audit_log WHERE idx = ?", (index,))[0][0])
        tx.execute("UPDATE audit_log SET entry = ? WHERE idx = ?", (data.replace(old, new), index))


@pytest.fixture
def edited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkpointed log of 7 entries (the CLI's store) whose entry 3 was edited afterwards."""
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        _fill(log, 7)
        log.checkpoint()
        _edit_entry(store, 3, b"zAgent1", b"zMallory")
    return tmp_path


def test_prove_writes_no_bundle_for_an_entry_edited_in_the_database(
    edited: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`audit prove 3` on a log whose entry 3 was edited after its checkpoint wrote the edited
    entry with a proof that does not lead to the signed root, said `wrote the proof` and exited 0:
    evidence handed to an auditor that `verify-proof` then calls INVALID. It now refuses (exit 1,
    REFUSED naming what is wrong), writes nothing, and an intact entry of the same log still proves."""
    out = edited / "entry.tlog-proof"
    # A refusal, as audit checkpoint's: exit 1, REFUSED on standard output (exit 2 until review R59).
    assert main(["audit", "prove", "3", "--out", str(out)]) == 1
    assert "entry 3 is not the entry its signed checkpoint holds" in capsys.readouterr().out
    assert not out.exists()
    assert main(["audit", "prove", "4", "--out", str(out)]) == 0
    assert main(["audit", "verify-proof", str(out), "--key", str(edited / "log.pub")]) == 0


def test_the_api_refuses_to_prove_an_entry_edited_in_the_database(tmp_path: Path) -> None:
    """``AuditLog.prove`` reads the entry's bytes without checking them against the stored leaf
    hash, and keeps the proof rebuilt from the leaf hashes without checking that it leads to the
    signed root: it returns a bundle that ``verify_bundle`` refuses, where ``explain`` raises
    ``TamperDetected`` for the same entry."""
    with SQLiteStore(tmp_path / "a.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        _fill(log, 7)
        log.checkpoint()
        _edit_entry(store, 3, b"zAgent1", b"zMallory")
        with pytest.raises(TamperDetected):
            log.explain(3)
        with pytest.raises(TamperDetected):
            verify_bundle(log.prove(3).text(), KEY.public, ORIGIN)  # the bundle is no evidence
        with pytest.raises(TamperDetected):
            log.prove(3)


@pytest.fixture
def cli_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A log of 3 entries (the CLI's store)."""
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        _fill(AuditLog(store, open_log_key(store)), 3)
    return db


def _first_time(db: Path) -> str:
    with SQLiteStore(db) as store:
        return next(AuditLog(store, open_log_key(store)).entries()).time


def test_show_since_refuses_a_z_after_fewer_than_six_fraction_digits(
    cli_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/cli.md: `--since` is a prefix of `YYYY-MM-DDTHH:MM:SS.ffffffZ`, anything else exit 2.
    `2026-11-29T10:15:00.1Z` is no such prefix, yet it was taken and compared as text: `Z` sorts
    after every digit, so entries written at 10:15:00.1xxxxx were left out (here: all of them)
    and `show` exited 0 as if there were none."""
    short = _first_time(cli_log)[:21] + "Z"
    with pytest.raises(SystemExit) as exited:
        main(["audit", "show", "--json", "--since", short])
    assert exited.value.code == 2
    assert "time prefix" in capsys.readouterr().err


def test_show_since_takes_every_prefix_of_the_time_format(
    cli_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--since` refused true prefixes of the time format (`2026-`, `2026-11`, `2026-11-29T`,
    `...:00.`) with exit 2, where docs/cli.md promises any prefix."""
    first = _first_time(cli_log)
    for length in range(1, len(first) + 1):
        capsys.readouterr()
        assert main(["audit", "show", "--json", "--since", first[:length]]) == 0, first[:length]
        assert len(capsys.readouterr().out.splitlines()) == 3, first[:length]


def test_verify_proof_refuses_an_empty_origin_as_unusable_input(
    cli_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`verify-proof FILE --key log.pub --origin "$ORIGIN"` with `ORIGIN` unset printed
    `INVALID` and exited 1 for a valid bundle: the evidence read as forged where the command
    line was wrong. docs/cli.md: an empty value that names something is exit 2."""
    bundle = cli_log.parent / "entry.tlog-proof"
    assert main(["audit", "prove", "0", "--out", str(bundle)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["audit", "verify-proof", str(bundle), "--key", str(cli_log.parent / "log.pub"), "--origin", ""])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert "INVALID" not in captured.out and "agentgate: error:" in captured.err


def test_the_report_of_a_tampered_log_does_not_say_it_has_no_checkpoint(
    edited: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page of a log that failed verification said `no signed checkpoint yet (run agentgate
    audit checkpoint)` although the log had one: a false statement, and advice (sign a fresh
    checkpoint) on a tampered log."""
    page = edited / "report.html"
    assert main(["audit", "report", "--out", str(page)]) == 1
    text = page.read_text()
    assert "TAMPERED" in text and "no signed checkpoint yet" not in text
    assert "no checkpoint shown: the log failed verification" in text
    assert "no signed checkpoint yet" in render_report([], None, [])  # an intact log without one


def test_prove_of_an_edited_entry_signs_no_fresh_checkpoint(tmp_path: Path) -> None:
    """Kills: ``prove`` signing and storing a fresh checkpoint (the log had grown since the last)
    before finding that the entry's bytes do not match its stored leaf hash: ``audit prove``
    failed (exit 2, no bundle) and yet wrote a checkpoint. Rule: a prove that fails stores
    nothing; an entry edited in the database is refused before anything is signed."""
    with SQLiteStore(tmp_path / "a.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        _fill(log, 7)
        log.checkpoint()
        _fill(log, 2)
        _edit_entry(store, 3, b"zAgent1", b"zMallory")
        with pytest.raises(TamperDetected, match="entry 3 is not the entry its signed checkpoint holds"):
            log.prove(3)
        assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 1
        # An entry not edited is refused too while the triggers are dropped: its fresh checkpoint would
        # vouch for what was edited meanwhile (review R57: it signed one here).
        with pytest.raises(TamperDetected, match="the protection trigger audit_log_no_update"):
            log.prove(4)
        assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 1
