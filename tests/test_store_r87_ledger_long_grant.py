"""A grant id longer than the ledger keeps (256 characters; a grant's id is 64 hexadecimal
digits) is refused by the budget ledger with ``InputError``, nothing written, on both stores
(review R87). Until then SQLite reserved against a 10,000-character id and PostgreSQL refused
it with a ``StoreError`` (``index row requires 10016 bytes``: its B-tree index entry holds about
2.7 KB)."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

ROOT = "d" * 64
LONGEST = "\U0001d11e" * 256  # 256 characters of 4 UTF-8 bytes each: 1 KB


def _rows(store: Store) -> tuple[int, int]:
    ledger = store.query("SELECT COUNT(*) FROM budget_ledger")[0][0]
    return ledger, store.query("SELECT COUNT(*) FROM budget_reservations")[0][0]


@pytest.mark.parametrize("length", [257, 10_000])
def test_a_chain_naming_a_grant_id_too_long_is_refused_and_nothing_written(store: Store, length: int) -> None:
    ledger = BudgetLedger(store)
    long = "e" * length
    for chain in ([long], [ROOT, long]):
        with pytest.raises(InputError, match=r"grant ids .*of at most 256 characters"):
            ledger.reserve(None, chain, dict.fromkeys(chain, 100), 1)
    assert _rows(store) == (0, 0)
    for read in (ledger.remaining, ledger.spent, ledger.usage):
        with pytest.raises(InputError, match=r"a grant id must be .*of at most 256 characters, got 'eee"):
            read(long)


def test_a_grant_id_of_the_longest_length_keeps_its_budget(store: Store) -> None:
    ledger = BudgetLedger(store)
    ledger.commit(ledger.reserve(None, [ROOT, LONGEST], {ROOT: 100, LONGEST: 50}, 30), 20)
    assert ledger.usage(LONGEST) == (20, 0)
    assert ledger.remaining(LONGEST) == 30
