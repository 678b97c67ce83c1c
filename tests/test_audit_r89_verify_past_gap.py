"""``verify`` goes on past a row deleted in the middle of the log.

Until review R89 the pass stopped at the first missing index: the report counted the entries
before it alone (3 where the log holds 5), read every checkpoint past it as a truncated log (``a
checkpoint covers 6 entries but the log has 3: entries were deleted or the database was restored
from an older copy``), and never read the entries after it, so an edit there went unreported.
Now the missing entries are named, every later entry is checked against its leaf hash and its own
index, each checkpoint past the gap is named as one whose root cannot be checked, and only a
checkpoint past the log's last index reads as a truncated log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit_r68_verify_counts import _cli
from test_audit_r89_missing_entry import log_missing_entry_3
from test_audit_tamper import _attack, _fill, _row

from agentgate.store import Store

DELETED = "entries were deleted or the database was restored from an older copy"


def test_entries_past_a_missing_row_are_checked_and_counted(store: Store) -> None:
    """The reviewer's case: row 3 of 6 deleted, entry 5's bytes edited, one checkpoint of size 6."""
    log = _fill(store, 6)
    log.checkpoint()
    data, _leaf = _row(store, 5)
    _attack(
        store,
        ("DELETE FROM audit_log WHERE idx = 3", ()),
        ("UPDATE audit_log SET entry = ? WHERE idx = 5", (data.replace(b"zAlice", b"zMallo"),)),
    )
    report = log.verify()
    assert report.problems == (
        "entry 3: missing (the next stored index is 4)",
        "entry 5: bytes do not match the stored leaf hash (entry edited)",
        "checkpoint of size 6: its root cannot be checked: entry 3, which its tree holds, is missing",
    )
    assert (report.size, report.missing, report.first_bad_index) == (5, 1, 3)
    assert report.size == log.size()


def test_rows_moved_past_a_missing_one_are_named_by_their_own_index(store: Store) -> None:
    """Past a missing entry no root can be recomputed: a swap of two rows (their leaf hashes with
    them) under the checkpoint is seen by the index each entry carries."""
    log = _fill(store, 8)
    log.checkpoint()
    (a, ha), (b, hb) = _row(store, 4), _row(store, 5)
    _attack(
        store,
        ("DELETE FROM audit_log WHERE idx IN (1, 4, 5)", ()),
        ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (4, ?, ?), (5, ?, ?)", (b, hb, a, ha)),
    )
    report = log.verify()
    assert report.problems == (
        "entry 1: missing (the next stored index is 2)",
        "entry 4: holds the entry of index 5 (rows moved, inserted or reordered)",
        "entry 5: holds the entry of index 4 (rows moved, inserted or reordered)",
        "checkpoint of size 8: its root cannot be checked: entry 1, which its tree holds, is missing",
    )
    assert (report.size, report.missing, report.first_bad_index) == (7, 1, 1)


def test_a_run_of_missing_rows_and_a_truncated_end_are_told_apart(store: Store) -> None:
    """Rows 2 to 4 deleted in the middle and the last two at the end, under checkpoints of sizes
    2, 6 and 10: the one of size 2 still verifies, the one of size 6 cannot be checked, and only the
    one of size 10 is past the log's end."""
    log = _fill(store, 2)
    log.checkpoint()
    for size in (6, 10):
        for i in range(size - log.size()):
            log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
        log.checkpoint()
    _attack(store, ("DELETE FROM audit_log WHERE idx IN (2, 3, 4, 8, 9)", ()))
    report = log.verify()
    assert report.problems == (
        "entry 2: missing, and so are entries 3..4 (the next stored index is 5)",
        "checkpoint of size 6: its root cannot be checked: entry 2, which its tree holds, is missing",
        f"a checkpoint covers 10 entries but the log has 5, the last at index 7: {DELETED}",
    )
    assert (report.size, report.missing, report.first_bad_index) == (5, 3, 2)


def test_verify_json_counts_the_rows_the_log_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``audit verify --json`` said ``"entries": 3`` for the reviewer's log (``audit show`` lists
    5); the verdict and exit code are as before."""
    db = log_missing_entry_3(tmp_path)
    code, out = _cli(db, ["audit", "verify", "--json"], monkeypatch, capsys)
    printed = json.loads(out)
    assert code == 1 and printed["verdict"] == "tampered"
    assert (printed["entries"], printed["first_bad_index"]) == (5, 3)
    assert [p["where"] for p in printed["problems"] if p["where"] != "log machinery"] == [
        "entry 3",
        "checkpoint of size 6",
    ]
