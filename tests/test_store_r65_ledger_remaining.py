"""``BudgetLedger.remaining`` of a grant whose ledger row is not made yet (review R65)."""

from __future__ import annotations

import pytest

from agentgate.errors import BudgetExceeded, InputError
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

ROOT, CHILD = "root-grant", "delegated-grant"


def test_a_delegated_grant_refused_at_its_parent_has_its_whole_budget_left(store: Store) -> None:
    """Review R65: a delegated grant whose every reservation failed at its parent has no ledger
    row (the row is made on its first reservation); given its budget, ``remaining`` answers the
    whole of it (nothing is spent or held), not ``None`` for its caller to read as "nothing
    spent"; without it, ``None`` still says there is no row."""
    ledger = BudgetLedger(store)
    with pytest.raises(BudgetExceeded, match=ROOT):
        ledger.reserve(None, [ROOT, CHILD], {ROOT: 10, CHILD: 50}, 20)
    assert ledger.remaining(CHILD, cap=50) == 50
    assert ledger.remaining(ROOT, cap=10) == 10
    assert ledger.remaining(CHILD) is None


def test_once_the_row_is_made_it_answers_whatever_cap_is_given(store: Store) -> None:
    """Review R65: a grant's budget is fixed when it is signed, and its row keeps it: once a
    reservation made the row, ``remaining`` reads the row, and a ``cap`` given (even a
    different one) changes nothing."""
    ledger = BudgetLedger(store)
    ledger.reserve(None, [ROOT, CHILD], {ROOT: 100, CHILD: 50}, 5)
    assert ledger.remaining(CHILD, cap=50) == 45
    assert ledger.remaining(CHILD, cap=999) == 45
    assert ledger.remaining(CHILD) == 45


@pytest.mark.parametrize("cap", [-1, 1.5, True, "50"])
def test_a_cap_that_is_no_amount_is_refused(store: Store, cap: object) -> None:
    """Review R65: a ``cap`` that is not a non-negative whole number of minor units is an
    ``InputError`` naming it, not an answer."""
    with pytest.raises(InputError, match="cap of grant delegated-grant"):
        BudgetLedger(store).remaining(CHILD, cap=cap)  # type: ignore[arg-type]


@pytest.mark.parametrize("grant_id", ["", 7, None])
def test_a_grant_id_that_is_not_text_is_refused(store: Store, grant_id: object) -> None:
    """Review R65: a grant id that is not non-empty text is an ``InputError`` on both stores
    (PostgreSQL refused an integer as a type mismatch, a ``StoreError``; SQLite answered ``None``)."""
    with pytest.raises(InputError, match="grant id"):
        BudgetLedger(store).remaining(grant_id)  # type: ignore[arg-type]
