"""A prune of expired grants and their budgets before a finite time past the least integer a
store holds (-2**63; ``unix_time`` takes any finite float) forgets nothing, on both stores
(review R85): until then SQLite refused ``BudgetLedger.prune_expired`` and
``GrantRepository.prune`` with a ``StoreError`` about an integer out of range, where PostgreSQL
pruned nothing, as ``BudgetLedger.prune`` does on both."""

from __future__ import annotations

import time

import pytest

from agentgate.authority import prune_grants
from agentgate.store import Store
from agentgate.store.grants import GrantRepository
from agentgate.store.ledger import BudgetLedger

GRANT = "b" * 64
LONG_AGO = int(time.time()) - 90 * 86400

FAR_PAST = [-1e19, -1e300, -(2.0**63) - 4096]
"""Finite times before -2**63 seconds."""


def _expired_grant_with_budget(store: Store) -> tuple[GrantRepository, BudgetLedger]:
    repo = GrantRepository(store)
    ledger = BudgetLedger(store)
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, recorded_at, token) "
            "VALUES (?, NULL, 'did:key:z', 'did:key:y', ?, ?, 'token')",
            (GRANT, LONG_AGO, LONG_AGO),
        )
        tx.execute(
            "INSERT INTO budget_ledger (grant_id, cap, remaining, spent) VALUES (?, 100, 90, 10)", (GRANT,)
        )
    return repo, ledger


@pytest.mark.parametrize("before", FAR_PAST)
def test_a_time_before_any_stored_integer_prunes_no_budget(store: Store, before: float) -> None:
    repo, ledger = _expired_grant_with_budget(store)
    try:
        assert ledger.prune_expired(before) == 0
        assert ledger.prune(before) == 0
        assert prune_grants(repo, before) == (0, 0)
        assert [row[0] for row in store.query("SELECT grant_id FROM budget_ledger")] == [GRANT]
        assert [row[0] for row in store.query("SELECT id FROM agentgate_grants")] == [GRANT]
        # A time of now still cuts at it: the budget goes, then the grant's record.
        assert ledger.prune_expired(time.time()) == 1
        assert prune_grants(repo, time.time()) == (1, 0)
    finally:
        repo.close()
