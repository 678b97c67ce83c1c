"""`agentgate tasks unsettled` (agentgate/cli/tasks.py) opens the store to read only, as the
other read verbs do (tests/test_store_read_only.py): a copy of a store it lists is left byte for
byte, and a store without an audit log or once-only calls lists nothing and gains no table."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _raw_sqlite import query
from test_store_read_only import _digests, _run, copied_as

from agentgate.store import SQLiteStore, open_store
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.once import OnceCalls

ORIGIN = "readonly.example/tasks"


@pytest.fixture(autouse=True)
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.tasks",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)


def _unsettled_copy(tmp_path: Path, journal: str) -> Path:
    """A store with two allowed once-only calls, one never settled, copied (as an auditor keeps
    it) into ``tmp_path/copy``: ``delete`` (in rollback-journal mode) or ``wal`` (closed cleanly)."""
    live, copy = tmp_path / "live", tmp_path / "copy"
    live.mkdir()
    copy.mkdir()
    with SQLiteStore(live / "s.db") as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many(
            [{"kind": "allow", "principal": "did:key:zA", "resource": f"tool:pay{i}"} for i in range(2)]
        )
        once = OnceCalls(store)
        with store.transaction() as tx:
            once.start(tx, "pay-0", 0)
            once.start(tx, "pay-1", 1)
            once.finish(tx, "pay-1", "ok")
    copied_as(journal, live / "s.db", copy / "s.db")
    return copy


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_tasks_unsettled_leaves_a_copy_of_the_store_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], journal: str
) -> None:
    """Review R56: tasks unsettled opened the store as a writer (switched a copy to WAL mode, made missing tables)."""
    copy = _unsettled_copy(tmp_path, journal)
    before = _digests(copy)
    assert _run(["tasks", "unsettled", "--json", "--store", str(copy / "s.db")]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["state"], r["resource"]) for r in rows] == [("pay-0", "started", "tool:pay0")]
    assert _digests(copy) == before


def test_tasks_unsettled_of_a_store_without_an_audit_log_lists_nothing_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: tasks unsettled of a store with no audit log or once table created both in it."""
    (tmp_path / "copy").mkdir()
    path = tmp_path / "copy" / "s.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store)  # a store of agentgate's, used by a scheduler only
        open_log_key(store, create=True)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    raw.close()
    before = _digests(path.parent)
    assert _run(["tasks", "unsettled", "--store", str(path)]) == 0
    assert capsys.readouterr().out == "no unsettled calls\n"
    assert _run(["tasks", "unsettled", "--json", "--store", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert _digests(path.parent) == before
    tables = {name for (name,) in query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"audit_log", "agentgate_once"}


@pytest.mark.postgres
def test_tasks_unsettled_of_a_postgresql_store_without_an_audit_log_lists_nothing(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: on a PostgreSQL store open to read only, a missing part is an error: no log, nothing to list."""
    with open_store(postgres_url) as store:
        DeadLetterStore(store)
        open_log_key(store, create=True)
    assert _run(["tasks", "unsettled", "--store", postgres_url]) == 0
    assert capsys.readouterr().out == "no unsettled calls\n"
    with open_store(postgres_url) as store:
        held = store.query("SELECT to_regclass('audit_log') IS NULL, to_regclass('agentgate_once') IS NULL")
    assert held == [(True, True)]
