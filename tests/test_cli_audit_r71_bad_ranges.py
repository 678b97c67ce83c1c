"""``audit show --last`` and ``audit report --out`` refuse bad input in their own words.

Until review R71 ``--last -3`` was refused as ``an entry index is 0 or more`` (``--last`` is a
count of entries, not an index), and ``audit report --out nodir/r.html`` verified and read the
whole log before failing on ``No such file or directory``, where ``audit prove`` and ``audit
checkpoint`` refuse such an ``--out`` first, naming the missing directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


def _log(db: Path) -> None:
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 3)
        log.checkpoint()


@pytest.mark.parametrize("value", ["-3", "9223372036854775808", "x"])
def test_a_bad_last_is_named_as_a_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """Review R71: ``--last -3`` said "an entry index is 0 or more". Rule: exit 2, one line that
    calls ``--last`` a number of entries."""
    db = tmp_path / "agentgate.db"
    _log(db)
    code, _out, err = cli(capsys, "audit", "show", "--store", str(db), "--last", value)
    assert code == 2
    assert (
        f"argument --last: expected a number of entries (digits 0-9, 0 .. 2**63-1), got {value!r}" in err
    ), err


def test_report_into_a_missing_directory_is_refused_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: the page was made (the log verified and read) and then not written, with the
    system's words. Rule: refused first, naming the directory, as ``prove`` refuses it; exit 2."""
    db = tmp_path / "agentgate.db"
    _log(db)
    out = tmp_path / "nodir" / "r.html"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    code, _printed, err = cli(capsys, "audit", "report", "--out", str(out))
    assert code == 2 and f"no directory {out.parent} to write it in" in err, err
    assert not out.parent.exists()
