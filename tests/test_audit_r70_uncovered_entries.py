"""``audit verify`` says which entries lie past the last signed checkpoint.

Until review R70 a log whose newest entries no checkpoint covers (appended by agentgate since the
last ``audit checkpoint``, or inserted by raw SQL with a correct leaf hash and index) verified as
``intact: N entries, root ..., 1 checkpoint``, with no word that those entries are signed by
nothing; only a log with no checkpoint at all was called unsigned.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN
from test_audit_r68_verify_counts import _cli

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

PAST = "(the last 2 entries, 3..4, are not yet covered by a checkpoint: run agentgate audit checkpoint)\n"


def _log(db: Path, signed: int, after: int) -> AuditLog:
    """A log of ``signed`` entries under one checkpoint and ``after`` more appended since."""
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * signed)
        log.checkpoint()
        if after:
            log.append_many([ENTRY] * after)
        return log


def test_the_library_reports_the_size_the_checkpoints_sign(tmp_path: Path) -> None:
    """Review R70: ``VerifyReport`` held no size signed, so no reader could tell which entries a
    checkpoint covers. Rule: ``signed_size`` is the largest size a checkpoint that opened signs."""
    db = tmp_path / "agentgate.db"
    _log(db, 3, 2)
    with SQLiteStore(db) as store:
        report = AuditLog(store, open_log_key(store), ORIGIN).verify()
    assert report.ok and report.size == 5 and report.signed_size == 3


def test_entries_appended_since_the_last_checkpoint_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: "intact: 5 entries, root ..., 1 checkpoint" for a log whose entries 3 and 4 no
    checkpoint signs. Rule: the verdict names how many and which, says how to cover them, and is
    still intact (exit 0); once they are covered it says nothing more."""
    db = tmp_path / "agentgate.db"
    _log(db, 3, 2)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 0
    assert out.startswith("intact: 5 entries, root ") and out.endswith(f", 1 checkpoint {PAST}"), out
    assert _cli(db, ["audit", "checkpoint"], monkeypatch, capsys)[0] == 0
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 0 and out.endswith(", 2 checkpoints\n"), out


def test_one_entry_past_the_checkpoint_is_named_in_the_singular(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: the count of entries past the checkpoint agrees with its number."""
    db = tmp_path / "agentgate.db"
    _log(db, 3, 1)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 0
    assert out.endswith(
        ", 1 checkpoint (the last entry, 3, is not yet covered by a checkpoint: run agentgate audit checkpoint)\n"
    ), out


def test_an_entry_inserted_by_raw_sql_past_the_checkpoint_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: a row inserted with plain SQL (the triggers in force, its index and leaf hash
    right) after the last checkpoint verified as intact with no word. Rule: it is named as not
    covered, like an entry agentgate appended."""
    source = tmp_path / "source.db"
    _log(source, 4, 1)
    raw = sqlite3.connect(source)
    row = raw.execute("SELECT idx, entry, leaf_hash FROM audit_log WHERE idx = 4").fetchone()
    raw.close()
    db = tmp_path / "agentgate.db"
    _log(db, 3, 1)
    raw = sqlite3.connect(db)
    raw.execute("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", row)
    raw.commit()
    raw.close()
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 0
    assert out.startswith("intact: 5 entries, root ") and out.endswith(f", 1 checkpoint {PAST}"), out


def test_a_saved_checkpoint_counts_as_covering_what_it_signs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: with ``--checkpoint FILE`` the entries past the larger of the stored and the
    saved checkpoints are named; entries the saved one signs are covered."""
    db = tmp_path / "agentgate.db"
    saved = tmp_path / "saved.note"
    _log(db, 3, 0)
    assert _cli(db, ["audit", "checkpoint", "--out", str(saved)], monkeypatch, capsys)[0] == 0
    with SQLiteStore(db) as store:
        AuditLog(store, open_log_key(store), ORIGIN).append_many([ENTRY] * 2)
    code, out = _cli(db, ["audit", "verify", "--checkpoint", str(saved)], monkeypatch, capsys)
    assert code == 0 and out.endswith(f", 1 checkpoint {PAST}"), out
