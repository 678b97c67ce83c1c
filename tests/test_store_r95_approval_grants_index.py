"""A revocation and the grants' prune seek a grant's approval requests by an index (review R95).

``approval_grants`` is keyed ``(approval_id, grant_id)``: until review R95 no index began with
``grant_id``, so ``ApprovalStore.void_standing_on`` (every ``Gate.revoke``) and the page query of
``GrantRepository.prune`` (once per revocation kept) each scanned every request's grants under
the store's write lock (0.5 s a revocation, 52 s a prune's query of 80 kept revocations, at a
million requests: docs/operations.md, Growth and pruning).
``approval_grants_grant`` is made with the approvals' tables, and a store made before it gets it
at its first writable open or ``agentgate store init``; a read-only open still writes nothing.
The plans are SQLite's for the very statements the two run (recorded as they run)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened, query

from agentgate.cli.main import main
from agentgate.store import SQLiteStore, open_store
from agentgate.store import _sqlite as sqlite_module
from agentgate.store.approvals import ApprovalStore
from agentgate.store.grants import GrantRepository

INDEX = "approval_grants_grant"


def _has_index(path: Path) -> bool:
    return bool(query(path, "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (INDEX,)))


def _schema(path: Path) -> list[Any]:
    return query(path, "SELECT type, name, sql FROM sqlite_master ORDER BY type, name")


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Every statement a store's transaction runs that reads ``approval_grants``, with its values."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    run = sqlite_module._SQLiteTransaction.execute

    def recording(self: Any, sql: str, params: Any = ()) -> Any:
        if "approval_grants" in sql and not sql.lstrip().upper().startswith(("CREATE", "INSERT", "DELETE")):
            seen.append((sql, tuple(params)))
        return run(self, sql, params)

    monkeypatch.setattr(sqlite_module._SQLiteTransaction, "execute", recording)
    yield seen


def _plan(path: Path, sql: str, params: tuple[Any, ...]) -> list[str]:
    with opened(path) as conn:
        return [str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def _scans_approval_grants(plan: list[str], sql: str) -> bool:
    """Whether ``plan`` reads ``approval_grants`` whole, under whichever alias ``sql`` gives it."""
    aliases = {"approval_grants"}
    words = sql.split()
    aliases |= {words[i + 1] for i, word in enumerate(words[:-1]) if word == "approval_grants"}
    return any(step.split()[:2] in (["SCAN", alias] for alias in aliases) for step in plan)


def test_revoke_and_prune_seek_a_grants_requests_by_index(
    tmp_path: Path, statements: list[tuple[str, tuple[Any, ...]]]
) -> None:
    path = tmp_path / "a.db"
    store = SQLiteStore(path)
    approvals, grants = ApprovalStore(store), GrantRepository(store)
    try:
        with store.transaction() as tx:
            approvals.void_standing_on(["g-revoked"], tx=tx)
        grants.prune(time.time(), expired=lambda token, grant_id, cut: True)
    finally:
        grants.close()
        store.close()
    revoke = [s for s in statements if "g.grant_id IN" in s[0]]
    prune = [s for s in statements if "a.grant_id = r.grant_id" in s[0]]
    assert revoke and prune  # both statements ran
    for sql, params in revoke + prune:
        plan = _plan(path, sql, params)
        assert not _scans_approval_grants(plan, sql), (sql, plan)
        assert any(INDEX in step for step in plan), (sql, plan)


def _old_store(path: Path) -> None:
    """A store whose approval tables were made before the index (as by agentgate before R95)."""
    store = SQLiteStore(path)
    try:
        ApprovalStore(store)
    finally:
        store.close()
    with opened(path) as conn:
        conn.execute(f"DROP INDEX {INDEX}")
    assert not _has_index(path)


def test_a_store_made_before_the_index_gets_it_when_opened_to_write(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    (plan,) = _plan(path, "SELECT approval_id FROM approval_grants WHERE grant_id = ?", ("g",))
    assert plan.startswith("SCAN")  # what a revocation did on it
    store = open_store(str(path))
    try:
        ApprovalStore(store)
    finally:
        store.close()
    assert _has_index(path)


def test_store_init_gives_a_store_made_before_the_index_the_index(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    with redirect_stdout(io.StringIO()):
        assert main(["store", "init", "--store", str(path)]) == 0
    assert _has_index(path)


def test_a_read_only_open_of_a_store_made_before_the_index_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    before = _schema(path), path.read_bytes()
    store = open_store(str(path), create=False, read_only=True)
    try:
        approvals = ApprovalStore(store)
        assert approvals.open_records() == []
        assert approvals.revoked_grant("no-such-request") is None
    finally:
        store.close()
    assert (_schema(path), path.read_bytes()) == before
    assert not _has_index(path)


@pytest.mark.postgres
def test_the_index_is_made_on_postgresql_too(postgres_url: str) -> None:
    store = open_store(postgres_url)
    try:
        ApprovalStore(store)
        rows = store.query("SELECT indexdef FROM pg_indexes WHERE indexname = ?", (INDEX,))
    finally:
        store.close()
    assert [str(r[0]) for r in rows] == [
        "CREATE INDEX approval_grants_grant ON public.approval_grants USING btree (grant_id)"
    ]
