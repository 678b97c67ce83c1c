"""Review R71 of ``AuditLog.verify``'s comparison of the reference index ``audit_refs`` with the
entries (``_check_refs``): what its check of an intact batch and its entry-by-entry check make of
rows a tamperer wrote, in a real SQLite store changed with SQL."""

from __future__ import annotations

import pytest
from test_audit_r70_refs_key import _drop_refs_key, _log
from test_audit_reference_index import _index_sql
from test_audit_tamper import _attack

from agentgate.audit.merkle import leaf_hash
from agentgate.store import SQLiteStore, Store


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


@pytest.mark.parametrize("row_5", ["kept", "deleted"])
def test_a_negative_reference_in_an_entry_and_its_row_is_named(store: Store, row_5: str) -> None:
    """Review R71: the check of an intact batch counted an entry whose last ``,"ref":`` is
    followed by ``-`` as one with a reference, so entry 3 edited (with its leaf hash) to say
    ``"ref":-2`` and its row set to -2 passed the comparison, where the entry-by-entry check names
    that row (no entry has a negative reference: ``explain`` reads it as none). Rule: the fast check
    accepts only what the entry-by-entry check finds nothing in; the row is named, beside the
    checkpoint's root that no longer matches, and so is the missing row of entry 5 that a count
    leaving the negative entry out would let the negative row stand in for."""
    log = _log(store)
    data = bytes(store.query("SELECT entry FROM audit_log WHERE idx = 3")[0][0])
    assert data.count(b',"ref":2,"resource":') == 1
    edited = data.replace(b',"ref":2,"resource":', b',"ref":-2,"resource":')
    _attack(
        store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 3", (edited, leaf_hash(edited)))
    )
    _index_sql(store, "UPDATE audit_refs SET ref = -2 WHERE idx = 3")
    if row_5 == "deleted":
        _index_sql(store, "DELETE FROM audit_refs WHERE idx = 5")
    problems = " | ".join(log.verify().problems)
    assert "entry 3 is malformed" in problems  # the root check reads it (not canonical)
    assert "audit_refs has a row for entry 3 (to -2), which refers to no entry" in problems
    if row_5 == "deleted":
        assert "entry 5 refers to entry 4, but audit_refs has no row for it" in problems
