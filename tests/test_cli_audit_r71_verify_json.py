"""``agentgate audit verify --json``: one JSON object on standard output with what the text says.

Until review R71 ``audit verify`` had no ``--json`` (argparse refused it, exit 2) where other
verbs that report (``store prune``, ``grant check``, ``policy lint``, the listings) have one: a
script watching the log had to parse ``TAMPERED: N problem(s)`` and ``  - ...`` lines.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN
from test_audit_r68_verify_counts import _cli

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

ROOT = Path(__file__).resolve().parents[1]
KEYS = {
    "verdict",
    "log_exists",
    "entries",
    "root",
    "checkpoints_checked",
    "saved_checkpoint",
    "signed_size",
    "unsigned",
    "not_covered",
    "entries_verify",
    "first_bad_index",
    "likely_cause",
    "problems",
    "machinery",
    "notes",
}


def _log(db: Path, signed: int, after: int) -> None:
    """A log of ``signed`` entries under one checkpoint and ``after`` more appended since."""
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * signed)
        log.checkpoint()
        log.append_many([ENTRY] * after)


def _verify_json(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *more: str
) -> tuple[int, dict[str, object]]:
    code, out = _cli(db, ["audit", "verify", "--json", *more], monkeypatch, capsys)
    printed = json.loads(out)  # the whole of standard output is one document
    assert isinstance(printed, dict) and set(printed) == KEYS, out
    return code, printed


def _sql(db: Path, statement: str) -> None:
    raw = sqlite3.connect(db)
    raw.execute(statement)
    raw.commit()
    raw.close()


def test_an_intact_log_is_one_object_with_its_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: ``audit verify --json`` was refused (exit 2). Rule: exit 0, the verdict, the
    entries, the root as text verifies it, the size the checkpoints sign and the entries past it."""
    db = tmp_path / "agentgate.db"
    _log(db, 3, 2)
    _code, text = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    code, printed = _verify_json(db, monkeypatch, capsys)
    assert code == 0
    assert printed["verdict"] == "intact" and printed["entries"] == 5 and printed["signed_size"] == 3
    assert printed["root"] == re.search(r"root ([0-9a-f]{64})", text)[1]  # type: ignore[index]
    assert printed["checkpoints_checked"] == 1 and printed["unsigned"] is False
    assert printed["not_covered"] == {"first": 3, "last": 4, "count": 2}
    assert printed["problems"] == [] and printed["notes"] == [] and printed["first_bad_index"] is None


def test_an_edited_entry_is_a_problem_naming_its_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: each problem is an object saying where (``entry 1``, its index) and what; the
    exit code is the text mode's, 1."""
    db = tmp_path / "agentgate.db"
    _log(db, 3, 0)
    _sql(db, "DROP TRIGGER audit_log_no_update")
    _sql(
        db,
        "UPDATE audit_log SET entry = CAST(REPLACE(CAST(entry AS TEXT), 'zA', 'zB') AS BLOB) WHERE idx = 1",
    )
    code, printed = _verify_json(db, monkeypatch, capsys)
    assert code == 1 and printed["verdict"] == "tampered" and printed["first_bad_index"] == 1
    assert printed["entries_verify"] is False and printed["machinery"] is None
    problems = printed["problems"]
    assert isinstance(problems, list)
    assert {"where": "entry 1", "index": 1, "message": problems[0]["message"]} == problems[0]
    assert "entry edited" in problems[0]["message"]
    assert any(p["where"] == "log machinery" and "audit_log_no_update" in p["message"] for p in problems)


def test_a_dropped_trigger_alone_keeps_the_entries_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: the machinery's problem is listed with the entries' facts and the closing
    words of the text mode (``machinery``), exit 1."""
    db = tmp_path / "agentgate.db"
    _log(db, 3, 2)
    _sql(db, "DROP TRIGGER audit_log_no_update")
    code, printed = _verify_json(db, monkeypatch, capsys)
    assert code == 1 and printed["verdict"] == "tampered" and printed["entries_verify"] is True
    assert printed["not_covered"] == {"first": 3, "last": 4, "count": 2}
    assert printed["machinery"] == "nothing refuses an edit of them until the triggers are back"
    assert [p["where"] for p in printed["problems"]] == ["log machinery"]  # type: ignore[union-attr]


def test_a_store_with_no_log_is_intact_and_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: a store where no log was made is intact, 0 entries, ``log_exists`` false."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        open_log_key(store, create=True)  # a log key, as a first checkpoint makes it
    code, printed = _verify_json(db, monkeypatch, capsys)
    assert code == 0 and printed["verdict"] == "intact" and printed["log_exists"] is False
    assert printed["entries"] == 0 and printed["problems"] == []


def test_a_dropped_log_is_tampered_with_one_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: a log whose tables were dropped is tampered, exit 1, its one problem named."""
    db = tmp_path / "agentgate.db"
    _log(db, 2, 0)
    for table in ("audit_log", "audit_checkpoints"):
        _sql(db, f"DROP TABLE {table}")
    code, printed = _verify_json(db, monkeypatch, capsys)
    assert code == 1 and printed["verdict"] == "tampered" and printed["log_exists"] is False
    assert printed["entries"] is None and len(printed["problems"]) == 1  # type: ignore[arg-type]


def test_the_docs_example_has_the_keys_the_command_prints() -> None:
    """Review R71: docs/cli.md shows an example object; it has exactly the keys printed."""
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = re.search(r"audit verify --json\n```\n\n```json\n(.*?)\n```", page, re.S)
    assert block, "docs/cli.md has no example after the audit verify --json command"
    example = json.loads(block[1])
    assert set(example) == KEYS
    assert set(example["problems"][0]) == {"where", "index", "message"}
