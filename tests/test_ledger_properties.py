"""Property: under any sequence of reserve / commit / release, the ledger's books balance.

For every grant: remaining = cap - (committed spends) - (amounts still reserved), and remaining is
never negative; a refused reservation changes nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgate.errors import BudgetExceeded
from agentgate.store import SQLiteStore
from agentgate.store.ledger import BudgetLedger

CAPS = {"root": 100, "a": 60, "b": 50}
CHAINS = [["root", "a"], ["root", "b"], ["root"]]

operation = st.one_of(
    st.tuples(st.just("reserve"), st.integers(0, 2), st.integers(0, 70)),
    st.tuples(st.just("commit"), st.integers(0, 30), st.integers(0, 80)),
    st.tuples(st.just("release"), st.integers(0, 30), st.just(0)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=25))
def test_books_balance_under_any_sequence(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "ledger.db", synchronous="NORMAL")
        ledger = BudgetLedger(store)
        open_reservations: list[tuple[str, list[str], int]] = []
        committed = dict.fromkeys(CAPS, 0)
        for op, pick, amount in ops:
            if op == "reserve":
                chain = CHAINS[pick]
                try:
                    reservation = ledger.reserve(None, chain, CAPS, amount)
                except BudgetExceeded:
                    continue
                open_reservations.append((reservation, chain, amount))
            elif open_reservations:
                reservation, chain, reserved = open_reservations.pop(pick % len(open_reservations))
                if op == "release":
                    ledger.release(reservation)
                    continue
                try:
                    ledger.commit(reservation, amount)
                except BudgetExceeded:
                    open_reservations.append((reservation, chain, reserved))  # still reserved
                    continue
                for grant in chain:
                    committed[grant] += amount
        for grant, cap in CAPS.items():
            held = sum(amount for _r, chain, amount in open_reservations if grant in chain)
            remaining = ledger.remaining(grant)
            expected = cap - committed[grant] - held
            assert (remaining if remaining is not None else cap) == expected
            assert expected >= 0
        store.close()
