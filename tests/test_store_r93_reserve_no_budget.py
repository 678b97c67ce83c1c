"""``BudgetLedger.reserve`` refuses, with ``InputError`` and nothing written, a reservation that
would charge no budget: ``caps`` naming no grant of the chain, or ``caps`` that is not a mapping
(a list of pairs, ``None``) (review R93). Until then such a call was stored with the chain ``[]``
and returned an id: nothing was charged, no cap bounded the amount, and only the ledger object
that made it could settle it; another process, the CLI and ``reservation()`` read the row as
malformed. The Gate always passes the chain's own budgets, so only a library caller could.

Real components: each store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

ROOT, TIP = "a" * 64, "b" * 64


@pytest.mark.parametrize(
    ("caps", "refused"),
    [
        ({}, "no grant of the chain has a cap"),
        ({"c" * 64: 5}, "no grant of the chain has a cap"),
        ([(TIP, 5)], "caps must be a mapping"),
        (None, "caps must be a mapping"),
    ],
    ids=["empty", "other-grant", "list-of-pairs", "none"],
)
def test_reserve_against_no_budget_is_refused_with_nothing_written(
    store: Store, caps: object, refused: str
) -> None:
    ledger = BudgetLedger(store)
    with pytest.raises(InputError, match=refused):
        ledger.reserve(None, [ROOT, TIP], caps, 10)  # type: ignore[arg-type]
    with store.transaction() as tx, pytest.raises(InputError, match=refused):
        ledger.reserve(tx, [ROOT, TIP], caps, 10)  # type: ignore[arg-type]
    assert store.query("SELECT COUNT(*) FROM budget_reservations")[0][0] == 0
    assert store.query("SELECT COUNT(*) FROM budget_ledger")[0][0] == 0


def test_a_reservation_against_one_budget_of_the_chain_is_settled_by_another_ledger(store: Store) -> None:
    reservation = BudgetLedger(store).reserve(None, [ROOT, TIP], {TIP: 5}, 4)
    BudgetLedger(store).commit(reservation, 3)
    assert BudgetLedger(store).usage(TIP) == (3, 0)
