"""``audit verify`` and ``audit report`` count entries and checkpoints in words that agree with
the number: ``1 entry``, ``1 checkpoint``, ``2 entries``, ``0 checkpoints``.

Until review R68 a log of one entry under one checkpoint verified as ``intact: 1 entries, root ...,
1 checkpoints`` (docs/operations.md quotes the line as ``N entries, root ..., K checkpoints``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN, _run

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


def _cli(
    db: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    capsys.readouterr()
    code = _run(argv)
    return code, capsys.readouterr().out


def _log(db: Path, entries: int, *, checkpoints: int) -> None:
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        for _ in range(checkpoints):
            log.append_many([ENTRY] * entries)
            log.checkpoint()
        if not checkpoints:
            log.append_many([ENTRY] * entries)


def test_one_entry_under_one_checkpoint_is_counted_in_the_singular(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: a log of one entry and one checkpoint verified as "1 entries ..., 1 checkpoints"."""
    db = tmp_path / "agentgate.db"
    _log(db, 1, checkpoints=1)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 0
    assert out.startswith("intact: 1 entry, root ") and out.endswith(", 1 checkpoint\n"), out


def test_other_counts_stay_plural(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: the fix for one entry leaves the plural of 0 and of 2 and more as it was."""
    db = tmp_path / "agentgate.db"
    _log(db, 1, checkpoints=2)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 0 and out.startswith("intact: 2 entries, root ") and out.endswith(", 2 checkpoints\n")
    unsigned = tmp_path / "unsigned.db"
    _log(unsigned, 1, checkpoints=0)
    code, out = _cli(unsigned, ["audit", "verify"], monkeypatch, capsys)
    assert code == 0 and out.startswith("intact: 1 entry, root ")
    assert out.endswith(
        ", 0 checkpoints (unsigned: no checkpoint yet, protected only by the database's triggers)\n"
    )


def test_the_closing_line_of_a_tampered_log_counts_in_the_singular(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: "the entries verify: 1 entries, root ..., 1 checkpoints; ..." after a dropped trigger."""
    db = tmp_path / "agentgate.db"
    _log(db, 1, checkpoints=1)
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.commit()
    raw.close()
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 1
    assert out.splitlines()[-1].startswith("the entries verify: 1 entry, root "), out
    assert ", 1 checkpoint; " in out.splitlines()[-1]


def test_report_counts_one_entry_in_the_singular(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: ``audit report`` said "wrote FILE: 1 entries, intact"."""
    db = tmp_path / "agentgate.db"
    _log(db, 1, checkpoints=1)
    page = tmp_path / "report.html"
    code, out = _cli(db, ["audit", "report", "--out", str(page)], monkeypatch, capsys)
    assert code == 0 and out.endswith(": 1 entry, intact\n"), out
