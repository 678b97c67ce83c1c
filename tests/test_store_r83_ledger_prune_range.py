"""``BudgetLedger.prune`` takes every finite time that ``unix_time`` accepts, as the approval and
dead-letter prunes do (review R83): one after the year 9999 forgets every settled reservation,
one before the year 1 none. Until then ``datetime.fromtimestamp`` raised a bare ``ValueError``
(1e12), ``OSError`` (2**62) or ``OverflowError`` (1e300) out of it; and a time in a year of
fewer than four digits (-5e10: the year 385) was written ``385-...``, which sorts after
``2026-...`` as text, so it forgot every settled reservation instead of none. A reservation
still held is never forgotten."""

from __future__ import annotations

import time

import pytest

from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.ledger import BudgetLedger

GRANT = "a" * 64

BEFORE_THE_CALENDAR = [-1e12, -(2**62), -1e300, -5e10, -62135596801]
"""Before the year 1, and the year 385 (a year of three digits)."""

AFTER_THE_CALENDAR = [1e12, 2**62, 1e300, 253402300800]
"""After the year 9999 (the last: its first second, 10000-01-01)."""


def _settled_and_held(ledger: BudgetLedger) -> tuple[str, str]:
    """A reservation committed now, and one still held."""
    settled = ledger.reserve(None, [GRANT], {GRANT: 1000}, 5)
    ledger.commit(settled, 3)
    return settled, ledger.reserve(None, [GRANT], {GRANT: 1000}, 5)


def _held(store: Store) -> set[str]:
    return {str(row[0]) for row in store.query("SELECT id FROM budget_reservations")}


@pytest.mark.parametrize("before", BEFORE_THE_CALENDAR)
def test_a_time_before_the_calendar_forgets_no_settled_reservation(store: Store, before: float) -> None:
    ledger = BudgetLedger(store)
    settled, held = _settled_and_held(ledger)
    assert ledger.prune(before) == 0
    assert _held(store) == {settled, held}


@pytest.mark.parametrize("before", AFTER_THE_CALENDAR)
def test_a_time_after_the_calendar_forgets_every_settled_reservation_and_no_held_one(
    store: Store, before: float
) -> None:
    ledger = BudgetLedger(store)
    _, held = _settled_and_held(ledger)
    assert ledger.prune(before) == 1
    assert _held(store) == {held}
    assert ledger.reservation(held).state == "reserved"


def test_a_time_within_the_calendar_still_cuts_at_it(store: Store) -> None:
    ledger = BudgetLedger(store)
    settled, held = _settled_and_held(ledger)
    assert ledger.prune(time.time() - 3600) == 0
    assert _held(store) == {settled, held}
    assert ledger.prune(time.time() + 60) == 1
    assert _held(store) == {held}


@pytest.mark.parametrize("before", [*BEFORE_THE_CALENDAR, *AFTER_THE_CALENDAR])
def test_every_prune_takes_the_same_times(store: Store, before: float) -> None:
    assert ApprovalStore(store).prune(before) == 0
    assert DeadLetterStore(store).prune(before) == 0
    assert BudgetLedger(store).prune(before) == 0
