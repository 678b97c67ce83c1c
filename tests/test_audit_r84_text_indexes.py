"""Review R84: rows at an index that is not a number, in SQLite tables made again without their
``INTEGER PRIMARY KEY`` (a tampering docs/audit-format.md lists as reported).

In ``audit_refs``, a row at the text index ``'x'`` (or bytes, or NULL) made ``explain`` raise
``ValueError`` (``int('x')``), and ``verify``, which compares the rows from index 0 up to the
log's size (SQLite sorts text and bytes after every number and leaves NULL out), never read it and
said intact. Now ``verify`` names such rows, and ``explain`` passes over a row at an index that is
not a whole number, which names no entry (3.5 is not entry 3: ``verify`` says ``explain`` would not
show the entry whose row was moved there). In ``audit_log``, two rows at ``'x'`` made
``repeated_indexes`` (``audit show``) raise ``ValueError``; such rows are the index of no entry,
which ``verify`` names.
"""

from __future__ import annotations

import pytest
from test_audit_r70_refs_key import _drop_refs_key, _log
from test_audit_reference_index import _index_sql
from test_audit_tamper import _attack, _drop_primary_key

from agentgate.store import SQLiteStore


@pytest.mark.parametrize(
    ("idx", "said"),
    [("x", "'x' (text)"), (b"\x01", "x'01' (bytes)"), (None, "NULL")],
    ids=["text", "bytes", "null"],
)
def test_a_reference_row_at_an_index_that_is_not_a_number_is_named_and_passed_over(
    sqlite_store: SQLiteStore, idx: object, said: str
) -> None:
    log = _log(sqlite_store)
    _drop_refs_key(sqlite_store)
    _index_sql(sqlite_store, "INSERT INTO audit_refs VALUES (?, 0)", (idx,))
    report = log.verify()
    assert report.first_bad_index is None and not report.ok  # the entries are intact
    assert (
        f"audit_refs has 1 row(s) at an index that is not a number (the first: {said}), which no entry "
        "has (the reference index was tampered with: rows written outside agentgate)"
    ) in report.problems, report.problems
    explained = log.explain(0)
    assert [e.index for e in explained.related] == [1]


def test_a_reference_row_at_a_fraction_names_no_entry(sqlite_store: SQLiteStore) -> None:
    log = _log(sqlite_store)
    _drop_refs_key(sqlite_store)
    _index_sql(sqlite_store, "UPDATE audit_refs SET idx = 1.5 WHERE idx = 1")
    assert any("audit explain 0 would not show entry 1" in p for p in log.verify().problems)
    assert log.explain(0).related == ()


def test_two_log_rows_at_a_text_index_are_no_repeated_entry(sqlite_store: SQLiteStore) -> None:
    log = _log(sqlite_store)
    _drop_primary_key(sqlite_store)
    copy = "INSERT INTO audit_log SELECT 'x', entry, leaf_hash FROM audit_log WHERE idx = 1"
    _attack(sqlite_store, (copy, ()), (copy, ()))
    _attack(
        sqlite_store, ("INSERT INTO audit_log SELECT 2, entry, leaf_hash FROM audit_log WHERE idx = 2", ())
    )
    assert log.repeated_indexes() == [(2, 2)]
    problems = log.verify().problems
    assert any(p.startswith("audit_log has 2 row(s) whose index is not a whole number") for p in problems)
