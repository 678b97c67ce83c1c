"""The budget ledger on both stores: reserve, commit, release, ancestors pay too."""

from __future__ import annotations

import pytest

from agentgate.errors import BudgetExceeded, InputError
from agentgate.store import Store
from agentgate.store.ledger import MAX_AMOUNT, BudgetLedger

CHAIN = ["root", "team", "agent"]
CAPS = {"root": 1000, "team": 500, "agent": 200}


def test_spending_at_a_child_counts_against_every_ancestor(store: Store) -> None:
    ledger = BudgetLedger(store)
    reservation = ledger.reserve(None, CHAIN, CAPS, 150)
    assert [ledger.remaining(g) for g in CHAIN] == [850, 350, 50]
    ledger.commit(reservation, 120)
    assert [ledger.remaining(g) for g in CHAIN] == [880, 380, 80]
    assert [ledger.spent(g) for g in CHAIN] == [120, 120, 120]


def test_reservation_above_any_ancestor_is_refused_and_reserves_nothing(store: Store) -> None:
    ledger = BudgetLedger(store)
    ledger.reserve(None, ["root", "sibling"], {"root": 1000, "sibling": 900}, 900)
    with pytest.raises(BudgetExceeded, match="grant root"):
        ledger.reserve(None, CHAIN, CAPS, 150)
    assert ledger.remaining("root") == 100


def test_a_refusal_at_the_tip_undoes_the_ancestors_decrements(store: Store) -> None:
    ledger = BudgetLedger(store)
    ledger.reserve(None, CHAIN, CAPS, 10)
    with pytest.raises(BudgetExceeded, match="grant agent"):
        ledger.reserve(None, CHAIN, CAPS, 195)
    assert [ledger.remaining(g) for g in CHAIN] == [990, 490, 190]


def test_release_returns_everything_once(store: Store) -> None:
    ledger = BudgetLedger(store)
    reservation = ledger.reserve(None, CHAIN, CAPS, 200)
    with pytest.raises(BudgetExceeded):
        ledger.reserve(None, CHAIN, CAPS, 1)
    ledger.release(reservation)
    assert ledger.remaining("agent") == 200
    with pytest.raises(InputError):
        ledger.release(reservation)
    with pytest.raises(InputError):
        ledger.commit(reservation, 10)
    assert ledger.reservation(reservation).state == "released"


def test_overrun_is_charged_only_if_it_fits(store: Store) -> None:
    ledger = BudgetLedger(store)
    first = ledger.reserve(None, CHAIN, CAPS, 100)
    ledger.commit(first, 150)
    assert ledger.remaining("agent") == 50
    second = ledger.reserve(None, CHAIN, CAPS, 40)
    with pytest.raises(BudgetExceeded):
        ledger.commit(second, 100)
    assert ledger.remaining("agent") == 10  # the failed commit changed nothing


def test_grants_without_a_cap_are_not_limited(store: Store) -> None:
    ledger = BudgetLedger(store)
    ledger.commit(ledger.reserve(None, CHAIN, {"agent": 5}, 5), 5)
    assert ledger.remaining("root") is None and ledger.remaining("agent") == 0


def test_reserve_joins_the_callers_transaction(store: Store) -> None:
    ledger = BudgetLedger(store)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        ledger.reserve(tx, CHAIN, CAPS, 100)
        raise RuntimeError("the audit entry could not be written")
    assert ledger.remaining("agent") is None


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_amounts_are_non_negative_integers(store: Store, bad: object) -> None:
    with pytest.raises(InputError):
        BudgetLedger(store).reserve(None, CHAIN, CAPS, bad)  # type: ignore[arg-type]


@pytest.mark.postgres
def test_a_commit_beyond_a_column_returns_the_whole_shortfall_on_postgresql(postgres_url: str) -> None:
    from agentgate.store._postgres import PostgresStore

    with PostgresStore(postgres_url) as store:
        ledger = BudgetLedger(store)
        with store.transaction() as tx:
            held = ledger.reserve(tx, ["g"], {"g": 1000}, 10)
        short = ledger.commit(held, 10**30, exhaust=True)
        assert short == 10**30 - 1000  # the budget paid its 1000, the rest is the shortfall
        assert ledger.remaining("g") == 0
        with store.transaction() as tx:
            again = ledger.reserve(tx, ["h"], {"h": MAX_AMOUNT}, 1)
        assert ledger.commit(again, MAX_AMOUNT + 5, exhaust=True) == 5


def test_merge_moves_one_open_reservation_into_another_of_the_same_chain(store: Store) -> None:
    """Rule: ``merge`` leaves the budgets as they were, ``into`` holding both amounts (settled
    once, as one) and ``other`` settled at 0; it refuses (False, nothing written) reservations of
    different chains, one already settled, or one merged into itself."""
    ledger = BudgetLedger(store)
    first = ledger.reserve(None, CHAIN, CAPS, 50)
    second = ledger.reserve(None, CHAIN, CAPS, 30)
    apart = ledger.reserve(None, ["root", "team"], CAPS, 5)
    with store.transaction() as tx:
        assert ledger.merge(first, second, tx)
        assert not ledger.merge(first, second, tx)  # ``second`` is settled now
        assert not ledger.merge(first, apart, tx) and not ledger.merge(first, first, tx)
    assert [ledger.remaining(g) for g in CHAIN] == [915, 415, 120]
    assert (ledger.reservation(first).amount, ledger.reservation(first).state) == (80, "reserved")
    assert (ledger.reservation(second).amount, ledger.reservation(second).state) == (0, "committed")
    assert ledger.reservation(apart).state == "reserved"
    ledger.commit(first, 60)  # 20 of the 80 held come back
    assert [ledger.remaining(g) for g in CHAIN] == [935, 435, 140]
    assert [ledger.spent(g) for g in CHAIN] == [60, 60, 60]
    with pytest.raises(InputError):
        ledger.commit(second, 1)
