"""Pruning expired grants' budgets reads the ledger's kept reservations once (review R65)."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

from agentgate.store import SQLiteStore, Store, Transaction
from agentgate.store.grants import GrantRepository
from agentgate.store.ledger import BudgetLedger

_LONG_AGO = int(time.time()) - 90 * 86400
_RECENT = "2999-01-01T00:00:00.000000Z"


def _fill(store: Store, budgets: int, kept: int, held: list[str] | None = None) -> list[str]:
    """``budgets`` expired grants with a budget row each, ``kept`` settled reservations that a
    prune keeps (settled later than any cut), and a reservation still held against each grant
    of ``held``; the expired grants' ids."""
    with store.transaction() as tx:
        gids = expired_budgets(tx, budgets)
        rows = [
            (secrets.token_hex(16), json.dumps([secrets.token_hex(32)]), "committed", _RECENT)
            for _ in range(kept)
        ]
        rows += [
            (secrets.token_hex(16), json.dumps([secrets.token_hex(32), g]), "reserved", None)
            for g in held or []
        ]
        tx.executemany(
            "INSERT INTO budget_reservations (id, chain, amount, state, created, settled) VALUES (?, ?, 1, ?, ?, ?)",
            [(rid, chain, state, _RECENT, settled) for rid, chain, state, settled in rows],
        )
    return gids


def expired_budgets(tx: Transaction, budgets: int) -> list[str]:
    """Write ``budgets`` grants that expired long ago, each with a budget row; their ids."""
    gids = [secrets.token_hex(32) for _ in range(budgets)]
    tx.executemany(
        "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, recorded_at, token) "
        "VALUES (?, NULL, 'did:key:z', 'did:key:y', ?, ?, 'token')",
        [(g, _LONG_AGO, _LONG_AGO) for g in gids],
    )
    tx.executemany(
        "INSERT INTO budget_ledger (grant_id, cap, remaining, spent) VALUES (?, 100, 90, 10)",
        [(g,) for g in gids],
    )
    return gids


def _opened(store: Store) -> BudgetLedger:
    GrantRepository(store).close()
    return BudgetLedger(store)


def test_a_budget_still_held_is_kept_and_the_others_go(store: Store) -> None:
    """Review R65: the expired grants' budgets go, except one a reservation not settled yet
    still holds (named anywhere in its chain), on both stores."""
    ledger = _opened(store)
    gids = _fill(store, 20, 30)
    _fill(store, 0, 0, held=[gids[3]])
    assert ledger.prune_expired(time.time()) == 19
    assert [row[0] for row in store.query("SELECT grant_id FROM budget_ledger")] == [gids[3]]


def _steps_to_prune(tmp_path: Path, name: str, budgets: int, kept: int) -> int:
    """SQLite virtual machine steps (in thousands) that ``prune_expired`` runs on a store
    holding ``budgets`` expired budgets and ``kept`` settled reservations: a count of work done,
    which the machine's load cannot skew."""
    store = SQLiteStore(tmp_path / name)
    try:
        ledger = _opened(store)
        _fill(store, budgets, kept)
        return pruning_steps(store, ledger, budgets)
    finally:
        store.close()


def pruning_steps(store: SQLiteStore, ledger: BudgetLedger, budgets: int) -> int:
    """SQLite virtual machine steps (in thousands) of ``ledger.prune_expired`` on ``store``,
    which must prune ``budgets`` budgets."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    with store.transaction() as tx:
        tx._conn.set_progress_handler(count, 1000)  # type: ignore[attr-defined]
        try:
            assert ledger.prune_expired(time.time(), tx=tx) == budgets
        finally:
            tx._conn.set_progress_handler(None, 0)  # type: ignore[attr-defined]
    return steps


def test_pruning_expired_budgets_grows_with_the_rows_not_their_product(tmp_path: Path) -> None:
    """Review R65: each expired budget was checked against every reservation the store keeps
    (a correlated scan: budgets x reservations), so that 50,000 expired budgets beside 2,000
    recent reservations held SQLite's write lock for 33 s of a 36 s ``store prune``, past the
    30 s busy timeout of every other process's decisions. The reservations still held are read
    once: twice the rows cost about twice the work, not four times."""
    small = _steps_to_prune(tmp_path, "small.db", 400, 400)
    large = _steps_to_prune(tmp_path, "large.db", 800, 800)
    assert large < 3 * small, (small, large)
