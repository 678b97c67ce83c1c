"""``verify`` names a row of ``audit_log`` whose index is not a whole number for what it is.

SQLite keeps whatever a column is given unless the column is the ``INTEGER PRIMARY KEY`` of a
rowid table; someone with the owner's rights can make ``audit_log`` again without it (the
triggers put back as they were) and store an entry's index as text, bytes, a fraction or NULL.
Until review R68 ``verify`` reported the gap this leaves but never the row: the text ``'5'`` as the
last index read "entry 5: missing (the next stored index is 5)", which contradicts itself, bytes
read ``b'\\x05'``, and a row at index NULL, or one of text in the middle, was named nowhere.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, VerifyReport, open_log_key

SHOWN = {"5": "'5' (text)", b"\x05": "x'05' (bytes)", 5.5: "5.5 (a fraction)", None: "NULL"}


def _verified_after(tmp_path: Path, index: int, value: object, *, declared: str = "idx") -> VerifyReport:
    """A log of six entries under a checkpoint, then ``audit_log`` made again with its first
    column ``declared`` (no primary key by default), its triggers put back as they were, and the
    index of entry ``index`` replaced by ``value``: what ``verify`` says of it."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 6)
        log.checkpoint()
    raw = sqlite3.connect(db)
    triggers = raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _sql in triggers:
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute(f"CREATE TABLE rebuilt ({declared}, entry, leaf_hash)")
    raw.execute("INSERT INTO rebuilt SELECT idx, entry, leaf_hash FROM audit_log")
    raw.execute("DROP TABLE audit_log")
    raw.execute("ALTER TABLE rebuilt RENAME TO audit_log")
    raw.execute("UPDATE audit_log SET idx = ? WHERE idx = ?", (value, index))
    for _name, sql in triggers:
        raw.execute(sql)
    raw.commit()
    raw.close()
    with SQLiteStore(db) as store:
        return AuditLog(store, open_log_key(store), ORIGIN).verify()


def _named(value: object) -> str:
    return (
        f"audit_log has 1 row(s) whose index is not a whole number (the first: {SHOWN[value]}), "
        "which no entry has: rows written outside agentgate"
    )


@pytest.mark.parametrize("value", list(SHOWN))
def test_a_row_whose_index_is_not_a_whole_number_is_named(tmp_path: Path, value: object) -> None:
    """Review R68: a row at index NULL, or at the text '3' (sorted after every number), was named
    by no problem: only "entry 3: missing" and the checkpoint that covers it said anything."""
    report = _verified_after(tmp_path, 3, value)
    assert not report.ok and report.first_bad_index == 3
    assert _named(value) in report.problems, report.problems


@pytest.mark.parametrize("value", ["5", b"\x05", 5.5])
def test_the_gap_it_leaves_names_the_next_row_for_what_it_is(tmp_path: Path, value: object) -> None:
    """Review R68: the text '5' in place of the last index read "entry 5: missing (the next stored
    index is 5)", and bytes b'\\x05' as Python writes them."""
    report = _verified_after(tmp_path, 5, value)
    assert report.problems[0] == (
        f"entry 5: missing (the next stored index is {SHOWN[value]}, not a whole number: a row "
        "written outside agentgate)"
    ), report.problems
    assert _named(value) in report.problems


@pytest.mark.parametrize("declared", ["idx INTEGER PRIMARY KEY DESC", "idx INTEGER PRIMARY KEY"])
def test_a_key_that_holds_anything_is_read_and_the_rowid_key_is_not(tmp_path: Path, declared: str) -> None:
    """Review R68: ``INTEGER PRIMARY KEY DESC`` is no rowid key (SQLite keeps text in it); the one
    agentgate declares holds whole numbers only, and its log verifies."""
    report = _verified_after(tmp_path, 3, 3 if declared.endswith("KEY") else 5.5, declared=declared)
    if declared.endswith("DESC"):
        assert _named(5.5) in report.problems
    else:
        assert report.ok, report.problems
