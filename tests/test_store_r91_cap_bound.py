"""A cap past ``MAX_AMOUNT`` (2**63-1, what a budget column holds) is an ``InputError`` naming the
grant and the bound in ``BudgetLedger.remaining`` and ``BudgetLedger.reserve`` alike, nothing
written, on both stores (review R91). Until then both checked a cap with no upper bound:
``remaining`` answered ``2**70`` as left, while ``reserve`` against the same cap overflowed the
column with a ``StoreError`` (the error a Gate reads as the store being unavailable). A cap of
exactly ``MAX_AMOUNT`` is still a budget. Policy and token budgets are bounded already, so only a
library caller could hand one.

Real components: each store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.ledger import MAX_AMOUNT, BudgetLedger

ROOT, TIP = "a" * 64, "b" * 64
REFUSED = rf"^cap of grant {TIP} must be at most {MAX_AMOUNT} \(2\*\*63-1\) minor units, the most a budget holds, got "


@pytest.mark.parametrize("cap", [MAX_AMOUNT + 1, 2**70, 10**5000], ids=["2**63", "2**70", "10**5000"])
def test_remaining_refuses_a_cap_past_the_bound(store: Store, cap: int) -> None:
    with pytest.raises(InputError, match=REFUSED):
        BudgetLedger(store).remaining(TIP, cap=cap)


@pytest.mark.parametrize("cap", [MAX_AMOUNT + 1, 2**70, 10**5000], ids=["2**63", "2**70", "10**5000"])
def test_reserve_refuses_a_cap_past_the_bound_with_nothing_written(store: Store, cap: int) -> None:
    ledger = BudgetLedger(store)
    # The root's budget first, as a chain is reserved root first: it is not touched either.
    with pytest.raises(InputError, match=REFUSED):
        ledger.reserve(None, [ROOT, TIP], {ROOT: 100, TIP: cap}, 1)
    with store.transaction() as tx, pytest.raises(InputError, match=REFUSED):
        ledger.reserve(tx, [ROOT, TIP], {ROOT: 100, TIP: cap}, 1)
    assert store.query("SELECT COUNT(*) FROM budget_ledger")[0][0] == 0
    assert store.query("SELECT COUNT(*) FROM budget_reservations")[0][0] == 0


def test_a_cap_of_the_bound_itself_is_a_budget(store: Store) -> None:
    ledger = BudgetLedger(store)
    assert ledger.remaining(TIP, cap=MAX_AMOUNT) == MAX_AMOUNT
    ledger.reserve(None, [TIP], {TIP: MAX_AMOUNT}, 1)
    assert ledger.remaining(TIP) == MAX_AMOUNT - 1
