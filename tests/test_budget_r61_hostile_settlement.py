"""Hostile settlement of budget reservations, on real stores (a SQLite file, and PostgreSQL
through the fixtures): two settlements of one reservation racing, a budget of 0, amounts at
2**63-1, a reservation settled twice. Each ends in one settlement, or a typed error, and no
budget below zero or charged twice."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentgate.errors import BudgetExceeded, InputError
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.ledger import MAX_AMOUNT, BudgetLedger

CHAIN = ("a" * 64, "b" * 64)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        made: Store = SQLiteStore(tmp_path / "agentgate.db")
    else:
        made = open_store(request.getfixturevalue("postgres_url"))
    yield made
    made.close()


def _race(*settlements: Callable[[], object]) -> list[BaseException | None]:
    """Run ``settlements`` at once, each in its own thread; what each raised (``None``: nothing)."""
    start = threading.Barrier(len(settlements))
    raised: list[BaseException | None] = [None] * len(settlements)

    def run(k: int) -> None:
        start.wait()
        try:
            settlements[k]()
        except BaseException as exc:  # collected for the assertion
            raised[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(settlements))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return raised


def test_two_settlements_racing_settle_once(store: Store) -> None:
    """Review R61: a commit and a release of one reservation at once: one wins, the other is refused."""
    ledger = BudgetLedger(store)
    for _ in range(5):
        reservation = ledger.reserve(None, CHAIN, {g: 1000 for g in CHAIN}, 10)
        other = BudgetLedger(store)  # another process's ledger: it knows nothing of the reservation
        raised = _race(
            functools.partial(ledger.commit, reservation, 30, exhaust=True),
            functools.partial(other.release, reservation),
        )
        # ``NotHeld``, an ``InputError`` (review R67: its own kind, which the Gate's outcome writes past)
        assert sorted(type(e).__name__ for e in raised if e is not None) == ["NotHeld"]
        state = ledger.reservation(reservation).state
        assert state in ("committed", "released")
    for grant in CHAIN:
        spent, held = ledger.usage(grant)
        assert held == 0 and spent + ledger.remaining(grant) == 1000  # type: ignore[operator]


def test_a_budget_of_zero_refuses_any_amount_but_zero(store: Store) -> None:
    """Review R61: a cap of 0 holds a reservation of 0 and refuses 1, writing nothing."""
    ledger = BudgetLedger(store)
    with pytest.raises(BudgetExceeded, match="less than 1 left"):
        ledger.reserve(None, CHAIN, {CHAIN[1]: 0}, 1)
    assert ledger.remaining(CHAIN[1]) is None
    reservation = ledger.reserve(None, CHAIN, {CHAIN[1]: 0}, 0)
    assert ledger.charge(reservation, 5, exhaust=True) == {CHAIN[1]: 0}
    assert ledger.usage(CHAIN[1]) == (0, 0) and ledger.remaining(CHAIN[1]) == 0


def test_amounts_at_the_largest_a_budget_holds(store: Store) -> None:
    """Review R61: 2**63-1 is reserved and charged exactly; past it, a typed error or the shortfall."""
    ledger = BudgetLedger(store)
    caps = {g: MAX_AMOUNT for g in CHAIN}
    with pytest.raises(BudgetExceeded, match="more than any budget can hold"):
        ledger.reserve(None, CHAIN, caps, MAX_AMOUNT + 1)
    reservation = ledger.reserve(None, CHAIN, caps, MAX_AMOUNT)
    assert ledger.commit(reservation, MAX_AMOUNT + 7, exhaust=True) == 7
    assert [ledger.usage(g) for g in CHAIN] == [(MAX_AMOUNT, 0)] * 2
    assert [ledger.remaining(g) for g in CHAIN] == [0, 0]


def test_a_reservation_settled_twice_is_refused_and_changes_nothing(store: Store) -> None:
    """Review R61: the second settlement (commit or release) of one reservation is an InputError."""
    ledger = BudgetLedger(store)
    reservation = ledger.reserve(None, CHAIN, {g: 100 for g in CHAIN}, 10)
    assert ledger.charge(reservation, 4) == {g: 4 for g in CHAIN}
    for again in (lambda: ledger.commit(reservation, 4), lambda: ledger.release(reservation)):
        with pytest.raises(InputError, match="already settled"):
            again()
    assert [ledger.usage(g) for g in CHAIN] == [(4, 0)] * 2


def test_a_negative_actual_amount_is_refused(store: Store) -> None:
    """Review R61: a negative actual (a model's negative usage read as a bill) is an InputError."""
    ledger = BudgetLedger(store)
    reservation = ledger.reserve(None, CHAIN, {g: 100 for g in CHAIN}, 10)
    with pytest.raises(InputError, match="non-negative"):
        ledger.charge(reservation, -5, exhaust=True)
    assert ledger.reservation(reservation).state == "reserved"
