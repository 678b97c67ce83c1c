"""A row of the reference index at a fraction just below the end of a read is named by ``verify``.

Review R90 bound the reads of ``audit_refs`` by the last index they cover (``idx <= end - 1``), so
that a log ending past a row at 2**63 - 1 is read without binding 2**63. In a SQLite
``audit_refs`` made again without its key, that left out a row between the last index of a run
and the next: one at 5.5 in a six-entry log was read by no query and ``verify`` said ok, and one
at 15.5 (the first batch being 16 entries) was reported only by the count, as a row that changed
while ``verify`` read it. The reads are bound by ``idx < end`` again, and by ``idx <= 2**63 - 1``
only for an end past it, so that both rows are named as the fractions they are.
"""

from __future__ import annotations

from test_audit_r70_refs_key import _drop_refs_key, _log
from test_audit_reference_index import _index_sql
from test_audit_scale import KEY, ORIGIN

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


def _named(at: float) -> str:
    return (
        f"audit_refs has a row (to 0) at index {at} (a fraction), not a whole number: a row written "
        "outside agentgate (the reference index was tampered with)"
    )


def test_a_fraction_just_below_the_log_s_end_is_named(sqlite_store: SQLiteStore) -> None:
    log = _log(sqlite_store)  # six entries
    _drop_refs_key(sqlite_store)
    _index_sql(sqlite_store, "INSERT INTO audit_refs VALUES (?, 0)", (5.5,))
    report = log.verify()
    assert not report.ok and report.first_bad_index is None  # the entries are intact
    assert report.problems == (_named(5.5),)


def test_a_fraction_between_two_batches_is_named_not_taken_for_a_race(sqlite_store: SQLiteStore) -> None:
    log = AuditLog(sqlite_store, KEY, origin=ORIGIN)
    for i in range(20):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "resource": "tool:x"})
        log.append({"kind": "outcome", "principal": "did:key:zAlice", "ref": 2 * i, "status": "ok"})
    log.checkpoint()
    _drop_refs_key(sqlite_store)
    assert log.verify().ok
    _index_sql(sqlite_store, "INSERT INTO audit_refs VALUES (?, 0)", (15.5,))  # the first batch: 0..15
    assert log.verify().problems == (_named(15.5),)
