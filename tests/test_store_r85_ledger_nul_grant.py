"""A grant id holding a NUL character is refused by the budget ledger with ``InputError``,
nothing written, on both stores (review R85): no grant's id (64 hexadecimal digits) holds one,
and PostgreSQL's text cannot. Until then SQLite reserved against such a chain and PostgreSQL
refused the decision with a ``StoreError``; reading its budget (``remaining``, ``usage``) was
``None`` or ``(0, 0)`` on SQLite and a ``StoreError`` on PostgreSQL."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

ROOT = "d" * 64
NUL = "e" * 32 + "\x00" + "e" * 31


def _rows(store: Store) -> tuple[int, int]:
    ledger = store.query("SELECT COUNT(*) FROM budget_ledger")[0][0]
    return ledger, store.query("SELECT COUNT(*) FROM budget_reservations")[0][0]


@pytest.mark.parametrize("chain", [[NUL], [ROOT, NUL]], ids=["alone", "below-a-root"])
def test_a_chain_naming_a_grant_id_with_nul_is_refused_and_nothing_written(
    store: Store, chain: list[str]
) -> None:
    ledger = BudgetLedger(store)
    caps = dict.fromkeys(chain, 100)
    with pytest.raises(InputError, match="without a NUL character"):
        ledger.reserve(None, chain, caps, 1)
    with store.transaction() as tx, pytest.raises(InputError, match="without a NUL character"):
        ledger.reserve(tx, chain, caps, 1)
    assert _rows(store) == (0, 0)
    assert ledger.remaining(ROOT) is None


def test_a_grant_id_with_nul_has_no_budget_to_read(store: Store) -> None:
    ledger = BudgetLedger(store)
    for read in (ledger.remaining, ledger.spent, ledger.usage):
        with pytest.raises(InputError, match="a grant id must be non-empty text without a NUL character"):
            read(NUL)
