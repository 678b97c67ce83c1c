from __future__ import annotations

import pytest

from agentgate.errors import StoreError
from agentgate.store import Store, open_store

DDL = {
    "sqlite": "CREATE TABLE IF NOT EXISTS t_probe (k TEXT PRIMARY KEY, v INTEGER NOT NULL);",
    "postgresql": "CREATE TABLE IF NOT EXISTS t_probe (k TEXT PRIMARY KEY, v BIGINT NOT NULL);",
}


def test_transaction_commits_and_rolls_back(store: Store) -> None:
    store.ensure_schema("probe", DDL)
    with store.transaction() as tx:
        tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("a", 1))
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("b", 2))
        raise RuntimeError("abort")
    assert store.query("SELECT k, v FROM t_probe ORDER BY k") == [("a", 1)]


def test_conditional_update_reports_rowcount(store: Store) -> None:
    store.ensure_schema("probe", DDL)
    with store.transaction() as tx:
        tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("a", 10))
        tx.execute("UPDATE t_probe SET v = v - ? WHERE k = ? AND v >= ?", (20, "a", 20))
        assert tx.rowcount == 0
        tx.execute("UPDATE t_probe SET v = v - ? WHERE k = ? AND v >= ?", (5, "a", 5))
        assert tx.rowcount == 1


def test_sqlite_store_is_wal_and_durable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "x" / "a.db"))
    store = open_store()
    assert store.query("PRAGMA journal_mode") == [("wal",)]
    assert store.query("PRAGMA synchronous") == [(2,)]  # FULL
    store.close()


def test_unreachable_store_is_a_typed_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError):
        open_store(str(blocker / "sub" / "a.db"))
