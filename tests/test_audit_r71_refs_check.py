"""``AuditLog.verify``'s comparison of the reference index ``audit_refs`` with the entries.

Review R71 made the comparison's check of an intact batch cheaper (the byte after each entry's
last ``,"ref":`` read into one bytes object and its digits counted, instead of a test of each
entry for ``null,"resource":``) and made it look for two rows of one entry before it trusts a
count: until then a second row for one entry could stand in, in the count, for the missing row
of another, and that one went unnamed.
"""

from __future__ import annotations

from test_audit_r70_refs_key import _drop_refs_key, _log
from test_audit_reference_index import _index_sql

from agentgate.store import Store


def test_a_second_row_does_not_hide_a_missing_one(store: Store) -> None:
    """Review R71: with ``audit_refs``' key dropped, entry 3's row deleted and a copy of entry 1's
    row added, the count of rows matched the count of entries with a reference, so the batch
    passed as intact: only the second row of entry 1 was reported, not that ``explain 2`` no
    longer finds entry 3. Rule: every entry whose reference has no row is named."""
    log = _log(store)
    _drop_refs_key(store)
    _index_sql(store, "DELETE FROM audit_refs WHERE idx = ?", (3,))
    _index_sql(store, "INSERT INTO audit_refs (idx, ref) VALUES (?, ?)", (1, 0))
    report = log.verify()
    assert report.first_bad_index is None  # the entries are intact
    assert "entry 3 refers to entry 2, but audit_refs has no row for it" in " | ".join(report.problems)
    assert any(p.startswith("audit_refs has 2 rows for entry 1, ") for p in report.problems), report.problems


def test_an_entry_that_ends_at_its_ref_key_is_compared_not_raised_on(store: Store) -> None:
    """Review R71: the fast check reads the byte after each entry's last ``,"ref":``; bytes that
    end there (none agentgate writes, but verify reads what is stored) have no such byte. Rule:
    such an entry has no reference, a row for it is named, and nothing raises."""
    log = _log(store)
    entries = [b'{"index":0,"ref":', b'{"index":1,"ref":5,"resource":"x"}']
    problems: list[str] = []
    # Entries 0 and 1 of the log: entry 1's row says 0, and this entry 1 says 5.
    assert log._check_refs(0, entries, set(), problems) == 1
    assert problems == [
        "entry 1 refers to entry 5, but audit_refs says 0 (the reference index was tampered with: "
        "audit explain 5 would not show entry 1)"
    ]
    problems.clear()
    assert log._check_refs(0, [entries[0]], set(), problems) == 0
    assert problems == []


def test_a_digit_after_a_nested_ref_is_not_a_reference(store: Store) -> None:
    """Review R71: only the last ``,"ref":`` of an entry is its reference; a number after an
    earlier one (in ``args``) is not counted. Rule: an allow whose args hold ``"ref":3`` and whose
    own reference is null needs no row, and a row added for it is named."""
    log = _log(store)
    assert log.verify().ok  # entry 4's args hold "ref":3, its own ref is null
    _index_sql(store, "INSERT INTO audit_refs (idx, ref) VALUES (?, ?)", (4, 3))
    problems = log.verify().problems
    assert "audit_refs has a row for entry 4 (to 3), which refers to no entry" in " | ".join(problems)
