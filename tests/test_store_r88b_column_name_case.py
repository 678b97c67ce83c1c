"""A SQLite store's column names are compared as SQLite compares them, ASCII letters in either
case alike (review R88; review R87 left them compared exactly): a ``budget_reservations`` with
columns ``ENTRY`` and ``UNIT`` has agentgate's ``entry`` and ``unit``, and ``agentgate_schema``
with ``ID``, ``VERSION`` and ``NEWEST`` is agentgate's. Before, every writable opening of such a
store failed (``StoreError``: duplicate column name, adding them again), and a command that
opens an existing store refused it as another application's (no column id, version)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened, query

from agentgate.store import open_store
from agentgate.store.audit._verify import _rowid_keyed
from agentgate.store.ledger import BudgetLedger, has_entry_column, has_unit_column


def _renamed(path: Path, table: str, columns: tuple[str, ...]) -> None:
    """Each of ``columns`` of ``table`` renamed to its name in upper case, as another program
    that named them so would have left them."""
    with opened(path) as db:
        for column in columns:
            db.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{column}" TO "{column.upper()}"')


def test_a_ledger_whose_columns_are_named_in_upper_case_opens(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = open_store(path)
    BudgetLedger(store)
    store.close()
    _renamed(path, "budget_reservations", ("entry", "unit"))
    store = open_store(path)
    try:
        ledger = BudgetLedger(store)
        assert has_entry_column(store) and has_unit_column(store)
        reservation = ledger.reserve(None, ["g1"], {"g1": 10}, 4, unit="usd")
        ledger.commit(reservation, 4)
        assert ledger.remaining("g1") == 6
    finally:
        store.close()
    assert query(path, "SELECT UNIT FROM budget_reservations") == [("usd",)]


def test_a_schema_record_whose_columns_are_named_in_upper_case_is_agentgates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.db"
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 0, err
    _renamed(path, "agentgate_schema", ("id", "version", "newest"))
    code, out, err = cli(capsys, "grant", "revoke", "ab" * 32, "--store", str(path), "--reason", "leaked")
    assert code == 0, err
    assert out.startswith("revoked "), out
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 0, err


def test_an_audit_log_keyed_by_a_column_named_in_upper_case_is_keyed_by_idx(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``audit verify``'s check of the log's key (a rowid ``INTEGER PRIMARY KEY`` ``idx``)."""
    path = tmp_path / "s.db"
    code, _, err = cli(capsys, "store", "init", "--store", str(path))
    assert code == 0, err
    _renamed(path, "audit_log", ("idx",))
    store = open_store(path, create=False, read_only=True)
    try:
        assert _rowid_keyed(store, "audit_log")
    finally:
        store.close()
