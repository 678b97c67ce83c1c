"""``GrantRepository.prune`` reads the revoked grants it checks in pages, so that its transaction
never sits idle through the whole check (review R70, second reading)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentgate.store import SQLiteStore
from agentgate.store.approvals import APPROVALS_DDL
from agentgate.store.grants import GrantRepository
from agentgate.store.ledger import LEDGER_DDL

ROWS = 2500
"""Revoked grants long expired: more than a page."""


class _Counted:
    """A real transaction whose statements are counted against the token checks made between
    them: what a PostgreSQL session spends idle in its transaction (its
    ``idle_in_transaction_session_timeout`` counts that time, not a statement's)."""

    def __init__(self, tx: Any) -> None:
        self.tx, self.since, self.most = tx, 0, 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self.since = 0
        return self.tx.execute(sql, params)

    def checked(self) -> None:
        self.since += 1
        self.most = max(self.most, self.since)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tx, name)


def test_prune_checks_the_revoked_tokens_a_page_at_a_time(tmp_path: Path) -> None:
    """Review R70: ``prune`` read every revoked, long-expired grant's token in one statement and
    then parsed each one in Python (some 30 us a token) before its next statement: on
    PostgreSQL, where R70 set ``idle_in_transaction_session_timeout`` to 30 s, a store with a
    million of them had its session ended mid-prune, nothing written, at every run, so it could
    never be pruned again. Now they are read and checked a page at a time: the checks made
    between two statements are bounded by the page, not by the table."""
    store = SQLiteStore(tmp_path / "agentgate.db")
    repo = GrantRepository(store)
    store.ensure_schema("approvals", APPROVALS_DDL)  # as ``prune`` makes them before ``_prune``
    store.ensure_schema("ledger", LEDGER_DDL)
    with store.transaction() as tx:
        for i in range(ROWS):
            gid = f"g{i:05d}"
            tx.execute(
                "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, recorded_at, token) "
                "VALUES (?, NULL, 'did:key:i', 'did:key:a', 1000, 1000, 'token')",
                (gid,),
            )
            tx.execute("INSERT INTO agentgate_revocations (grant_id, revoked_at) VALUES (?, 1000)", (gid,))
    seen: list[str] = []
    with store.transaction() as tx:
        work = _Counted(tx)

        def expired(token: object, grant_id: str, cut: int) -> bool:
            work.checked()
            seen.append(grant_id)
            return True

        grants, revocations = repo._prune(work, 2000.0, expired)  # type: ignore[arg-type]
    assert sorted(seen) == [f"g{i:05d}" for i in range(ROWS)]  # each checked once
    assert (grants, revocations) == (ROWS, ROWS)
    assert work.most <= 1000, work.most
    assert store.query("SELECT count(*) FROM agentgate_revocations") == [(0,)]
    store.close()
