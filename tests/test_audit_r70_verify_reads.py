"""``AuditLog.verify`` reads the rows of ``audit_log`` once.

Until review R70 verify read every row of the log twice: its pass read the entries in batches,
then ``COUNT(*) FROM audit_log WHERE idx >= 0 AND idx < size`` walked the table again (SQLite keeps
the rows in the table's own tree, keyed by ``idx``; PostgreSQL visits the heap for rows its
visibility map does not cover) to find indexes held by more than one row, which a table keyed by
``idx`` as agentgate makes it cannot hold. A table without that key is still counted.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_audit_tamper import _attack, _drop_primary_key, _fill

from agentgate.store import Store


def _spied(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of each query ``store`` runs from now on (the store runs them as before)."""
    sent: list[str] = []
    real = store.query

    def query(sql: str, params: Any = ()) -> Any:
        sent.append(sql)
        return real(sql, params)

    monkeypatch.setattr(store, "query", query)
    return sent


def _counts_of_entries(statements: list[str]) -> list[str]:
    """The statements that count rows of ``audit_log`` at the indexes of entries (0 and up)."""
    return [s for s in statements if "COUNT(" in s and "FROM audit_log WHERE idx >= 0" in s]


def test_verify_of_an_intact_log_reads_its_rows_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R70: verify counted the rows of audit_log below the log's size after its pass, a
    second walk over the table, to find an index held by two rows, which agentgate's table (keyed
    by ``idx``) cannot hold. Rule: on that table the pass is the only read of the entries' rows;
    the report is the same."""
    log = _fill(store, 40)
    log.checkpoint()
    sent = _spied(store, monkeypatch)
    report = log.verify()
    assert report.ok and report.size == 40 and report.checkpoints_checked == 1
    assert any("FROM audit_log WHERE idx > ?" in s for s in sent)  # the pass
    assert _counts_of_entries(sent) == []


def test_a_table_without_its_key_is_still_counted(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R70: the count is left out only where the table's key rules out a second row of an
    index; in a table without it, a second row is counted and named."""
    log = _fill(store, 20)
    log.checkpoint()
    _drop_primary_key(store)
    _attack(store, ("INSERT INTO audit_log SELECT 7, entry, leaf_hash FROM audit_log WHERE idx = 7", ()))
    sent = _spied(store, monkeypatch)
    report = log.verify()
    assert report.first_bad_index == 7
    assert any(p.startswith("entry 7: 2 rows hold this index") for p in report.problems), report.problems
    assert _counts_of_entries(sent)


@pytest.mark.postgres
def test_a_postgresql_table_inheriting_from_the_log_is_counted(
    postgres_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: on PostgreSQL the rows of a table inheriting from ``audit_log`` are read with
    it, and its primary key does not cover them: with such a child the count is made, and a second
    row of an index held there is named (leaving the count out on the key alone said intact)."""
    log = _fill(postgres_store, 20)
    log.checkpoint()
    _attack(
        postgres_store,
        ("CREATE TABLE audit_log_child () INHERITS (audit_log)", ()),
        ("INSERT INTO audit_log_child SELECT * FROM audit_log WHERE idx = 7", ()),
    )
    sent = _spied(postgres_store, monkeypatch)
    report = log.verify()
    assert report.first_bad_index == 7
    assert any(p.startswith("entry 7: 2 rows hold this index") for p in report.problems), report.problems
    assert _counts_of_entries(sent)
