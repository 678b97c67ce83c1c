"""Pruning expired grants' budgets checks the reservations still held once, not once per budget
(review R66)."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

from test_store_r65_prune_expired_budgets import _RECENT, _opened, expired_budgets, pruning_steps

from agentgate.store import SQLiteStore, Store


def _fill(store: Store, budgets: int, chains: list[str]) -> list[str]:
    """``budgets`` expired grants with a budget row each, and a reservation still held for each
    chain text of ``chains``; the expired grants' ids."""
    with store.transaction() as tx:
        gids = expired_budgets(tx, budgets)
        tx.executemany(
            "INSERT INTO budget_reservations (id, chain, amount, state, created) VALUES (?, ?, 1, 'reserved', ?)",
            [(secrets.token_hex(16), chain, _RECENT) for chain in chains],
        )
    return gids


def _others(count: int) -> list[str]:
    """``count`` chains, as agentgate writes them, of grants that hold no expired budget."""
    return [json.dumps([secrets.token_hex(32), secrets.token_hex(32)]) for _ in range(count)]


def test_budgets_named_by_held_reservations_stay_whatever_the_chain_text(store: Store) -> None:
    """Review R66: a budget stays while a reservation still held names its grant, as a chain
    agentgate writes it or edited by hand (not JSON: then anywhere in its text); a budget whose
    grant only a longer id of a held chain contains goes, as do the rest, on both stores."""
    ledger = _opened(store)
    gids = _fill(store, 6, [])
    _fill(
        store,
        0,
        [
            json.dumps([secrets.token_hex(32), gids[0]]),
            json.dumps([gids[1]]),
            f"not json {gids[2]}",
            json.dumps([gids[3] + "0"]),  # another grant's id, longer: names no budget here
            *_others(20),
        ],
    )
    assert ledger.prune_expired(time.time()) == 3
    kept = {row[0] for row in store.query("SELECT grant_id FROM budget_ledger")}
    assert kept == set(gids[:3])


def _steps_to_prune(tmp_path: Path, name: str, budgets: int, held: int) -> int:
    """SQLite virtual machine steps (in thousands) that ``prune_expired`` runs on a store
    holding ``budgets`` expired budgets and ``held`` reservations still held (of other grants):
    a count of work done, which the machine's load cannot skew."""
    store = SQLiteStore(tmp_path / name)
    try:
        ledger = _opened(store)
        _fill(store, budgets, _others(held))
        return pruning_steps(store, ledger, budgets)
    finally:
        store.close()


def test_pruning_grows_with_held_reservations_not_their_product_with_budgets(tmp_path: Path) -> None:
    """Review R66: review R65 read the reservations still held once, but each expired budget was
    still checked against every one of them (a substring search per pair: budgets x held), so
    that a store with many calls in flight (leases' reservations, crashed processes') made
    ``store prune`` hold SQLite's write lock for a time growing as the product. The held chains'
    grant ids are now read once into a set the budgets are matched against: twice the rows cost
    about twice the work, not four times."""
    small = _steps_to_prune(tmp_path, "small.db", 300, 300)
    large = _steps_to_prune(tmp_path, "large.db", 600, 600)
    assert large < 3 * small, (small, large)
