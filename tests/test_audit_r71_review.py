"""Review R71 of ``AuditLog.verify``'s comparison of the reference index ``audit_refs`` with the
entries (``_check_refs``): what its check of an intact batch and its entry-by-entry check make of
rows a tamperer wrote, in a real SQLite store changed with SQL."""

from __future__ import annotations

import pytest
from test_audit_r70_refs_key import _drop_refs_key, _log
from test_audit_reference_index import _index_sql

from agentgate.store import SQLiteStore


@pytest.mark.parametrize("idx", [3.5, 6.25], ids=["among-the-rows", "past-the-last"])
def test_a_row_at_a_fractional_index_is_named_not_raised_on(sqlite_store: SQLiteStore, idx: float) -> None:
    """Review R71: in an ``audit_refs`` whose key was dropped, entry 3's row moved to index 3.5
    made ``verify`` raise ``TypeError`` (the check of an intact batch picked the entries at the
    rows' indexes: a list takes no float index); and the entry-by-entry check read 3.5 as the 3 it
    is not (``explain 2`` looks for entry 3.5 and finds none). Rule: verify never raises for a
    tampered log; the entry whose row is missing and the row at an index no entry has are named."""
    log = _log(sqlite_store)
    _drop_refs_key(sqlite_store)
    _index_sql(sqlite_store, "UPDATE audit_refs SET idx = ? WHERE idx = 3", (idx,))
    report = log.verify()
    assert report.first_bad_index is None  # the entries are intact
    problems = " | ".join(report.problems)
    assert "entry 3 refers to entry 2, but audit_refs has no row for it" in problems
    if idx < 6:  # among the entries read (a row past them is left alone: see verify)
        assert f"audit_refs has a row (to 2) at index {idx} (a fraction), not a whole number" in problems


def test_a_row_at_a_whole_index_stored_as_a_real_is_the_entry_s(sqlite_store: SQLiteStore) -> None:
    """Review R71: in a table whose ``idx`` column has no type, 3.0 stays a real number; it is
    the index 3 (SQLite compares it equal, ``explain`` finds entry 3 through it). Rule: such a
    row is the entry's, not a problem, and nothing raises."""
    log = _log(sqlite_store)
    for sql in (
        "CREATE TABLE bare AS SELECT idx, ref FROM audit_refs",
        "DROP TABLE audit_refs",
        "CREATE TABLE audit_refs (idx, ref)",
        "INSERT INTO audit_refs SELECT idx, ref FROM bare",
        "DROP TABLE bare",
        "UPDATE audit_refs SET idx = 3.0 WHERE idx = 3",
    ):
        _index_sql(sqlite_store, sql)
    assert sqlite_store.query("SELECT typeof(idx) FROM audit_refs WHERE ref = 2") == [("real",)]
    assert log.verify().ok
