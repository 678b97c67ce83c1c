"""``audit verify``'s closing line says what is true of the log's machinery.

Until review R58 a store whose record of repairs (``audit_repairs``) was dropped, every protection
trigger of the log still in force, got the closing line "nothing refuses an edit of them until the
triggers are back": untrue (the triggers refuse edits), and a reader would go looking for
triggers to put back instead of restoring the record.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN, _run

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


def _verify(db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    capsys.readouterr()
    code = _run(["audit", "verify"])
    return code, capsys.readouterr().out


def _log(db: Path) -> None:
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()


def _drop(db: Path, statement: str) -> None:
    raw = sqlite3.connect(db)
    raw.execute(statement)
    raw.commit()
    raw.close()


def test_a_dropped_record_of_repairs_alone_does_not_say_the_triggers_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58: a dropped audit_repairs, the log's triggers in force, closed with "nothing refuses an edit until the triggers are back"."""
    db = tmp_path / "agentgate.db"
    _log(db)
    _drop(db, "DROP TABLE audit_repairs")
    code, out = _verify(db, monkeypatch, capsys)
    assert code == 1
    closing = out.splitlines()[-1]
    assert closing.startswith("the entries verify: 2 entries")
    assert "nothing refuses an edit" not in closing
    assert "the record of repairs is gone" in closing


def test_a_dropped_trigger_still_says_nothing_refuses_an_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58: the closing line for a dropped protection trigger is kept as it was."""
    db = tmp_path / "agentgate.db"
    _log(db)
    _drop(db, "DROP TRIGGER audit_log_no_update")
    code, out = _verify(db, monkeypatch, capsys)
    assert code == 1
    assert out.splitlines()[-1].endswith("nothing refuses an edit of them until the triggers are back")


def test_a_trigger_agentgate_did_not_make_is_what_the_closing_line_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: an extra trigger on audit_log, every protection trigger in force, closed with "the triggers are back"."""
    db = tmp_path / "agentgate.db"
    _log(db)
    _drop(db, "CREATE TRIGGER mirror AFTER INSERT ON audit_log BEGIN SELECT 1; END")
    code, out = _verify(db, monkeypatch, capsys)
    assert code == 1
    closing = out.splitlines()[-1]
    assert closing.startswith("the entries verify: 2 entries")
    assert "the triggers are back" not in closing and "nothing refuses an edit" not in closing
    assert "a trigger agentgate did not make runs as the log's tables are written" in closing


def test_a_dropped_trigger_beside_an_extra_one_names_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: a dropped protection trigger and an extra one: the closing line says both."""
    db = tmp_path / "agentgate.db"
    _log(db)
    _drop(db, "DROP TRIGGER audit_log_no_update")
    _drop(db, "CREATE TRIGGER mirror AFTER INSERT ON audit_log BEGIN SELECT 1; END")
    code, out = _verify(db, monkeypatch, capsys)
    assert code == 1
    closing = out.splitlines()[-1]
    assert "nothing refuses an edit of them until the triggers are back" in closing
    assert "a trigger agentgate did not make runs as the log's tables are written" in closing
