"""``AuditLog.verify`` names a second row of one entry in the reference index ``audit_refs``.

Until review R70, in an ``audit_refs`` made again without its primary key (or whose key was
dropped), two identical rows for one entry passed ``verify`` unreported: the comparison kept one
row per index, and the final count of the index's rows counted both on each side. Like
``audit_log``'s (``_one_row_per_index``), the table's key is read from the catalog, and only a table
without it is searched for indexes held twice: an intact log costs one catalog read more.
"""

from __future__ import annotations

import pytest
from test_audit_r70_verify_reads import _spied
from test_audit_reference_index import _call_log, _index_sql
from test_audit_scale import KEY, ORIGIN

from agentgate.store import Store
from agentgate.store.audit import AuditLog


def _log(store: Store) -> AuditLog:
    """Six entries of which 1, 3 and 5 refer to others, under one checkpoint."""
    log = AuditLog(store, KEY, origin=ORIGIN)
    _call_log(log)
    log.checkpoint()
    return log


def _drop_refs_key(store: Store) -> None:
    """``audit_refs`` without its primary key, its rows, its other index and the trigger that
    keeps it left as they were: two rows may then hold one index."""
    if store.dialect == "sqlite":
        for sql in (
            "CREATE TABLE bare AS SELECT idx, ref FROM audit_refs",
            "DROP TABLE audit_refs",
            "CREATE TABLE audit_refs (idx INTEGER, ref INTEGER NOT NULL)",
            "INSERT INTO audit_refs SELECT idx, ref FROM bare",
            "DROP TABLE bare",
            "CREATE INDEX audit_refs_by_ref ON audit_refs (ref)",
        ):
            _index_sql(store, sql)
    else:
        _index_sql(store, "ALTER TABLE audit_refs DROP CONSTRAINT audit_refs_pkey")


def _refs_counts(statements: list[str]) -> list[str]:
    """The statements that look for indexes of ``audit_refs`` held by more than one row."""
    return [s for s in statements if "FROM audit_refs" in s and "GROUP BY" in s]


@pytest.mark.parametrize("ref", [0, 4], ids=["copy", "another-ref"])
def test_a_second_row_of_one_entry_in_the_reference_index_is_named(store: Store, ref: int) -> None:
    """Review R70: with ``audit_refs``' key dropped, a second row for entry 1 (which refers to
    entry 0) passed verify with no problem. Rule: each entry that more than one row of the index
    holds is named, the log's entries still intact (no bad index)."""
    log = _log(store)
    _drop_refs_key(store)
    assert log.verify().ok  # the key dropped, nothing else: still intact
    _index_sql(store, "INSERT INTO audit_refs (idx, ref) VALUES (?, ?)", (1, ref))
    report = log.verify()
    assert report.first_bad_index is None
    assert any(p.startswith("audit_refs has 2 rows for entry 1, ") for p in report.problems), report.problems


def test_an_intact_log_reads_the_key_not_the_rows(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R70: the search for a second row is made only where the table's key does not rule
    it out; on agentgate's table verify reads the catalog, not the index's rows again."""
    log = _log(store)
    sent = _spied(store, monkeypatch)
    assert log.verify().ok
    assert _refs_counts(sent) == []
    _drop_refs_key(store)
    sent.clear()
    assert log.verify().ok
    assert _refs_counts(sent)


@pytest.mark.postgres
def test_a_postgresql_table_inheriting_from_the_reference_index_is_searched(postgres_store: Store) -> None:
    """Review R70: on PostgreSQL the rows of a table inheriting from ``audit_refs`` are read with
    it, and its primary key does not cover them: a second row for an entry held there is named."""
    log = _log(postgres_store)
    _index_sql(postgres_store, "CREATE TABLE audit_refs_child () INHERITS (audit_refs)")
    _index_sql(postgres_store, "INSERT INTO audit_refs_child SELECT * FROM audit_refs WHERE idx = 3")
    problems = log.verify().problems
    assert any(p.startswith("audit_refs has 2 rows for entry 3, ") for p in problems), problems
