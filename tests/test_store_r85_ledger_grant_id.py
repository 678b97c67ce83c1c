"""``BudgetLedger.spent`` and ``usage`` refuse a grant id that is not non-empty text with the
``InputError`` that ``remaining`` gives, on both stores (review R85). Until then the stores
answered one differently: ``spent(5)`` was 0 on SQLite and a ``StoreError`` on PostgreSQL,
``usage(["g"])`` a ``StoreError`` on SQLite and ``(0, 0)`` on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

GRANT = "c" * 64

NOT_A_GRANT_ID = {"int": 5, "list": ["g"], "empty": "", "none": None, "bool": True, "10**5000": 10**5000}


@pytest.mark.parametrize("grant_id", list(NOT_A_GRANT_ID.values()), ids=list(NOT_A_GRANT_ID))
def test_every_read_of_a_budget_refuses_what_is_no_grant_id(store: Store, grant_id: Any) -> None:
    ledger = BudgetLedger(store)
    for read in (ledger.remaining, ledger.spent, ledger.usage):
        with pytest.raises(InputError, match="a grant id must be non-empty text"):
            read(grant_id)
    with store.transaction() as tx, pytest.raises(InputError, match="a grant id must be non-empty text"):
        ledger.usage(grant_id, tx=tx)


def test_a_grant_id_still_reads_its_budget(store: Store) -> None:
    ledger = BudgetLedger(store)
    assert ledger.usage(GRANT) == (0, 0)
    ledger.commit(ledger.reserve(None, [GRANT], {GRANT: 100}, 30), 20)
    ledger.reserve(None, [GRANT], {GRANT: 100}, 5)
    assert ledger.spent(GRANT) == 20
    assert ledger.usage(GRANT) == (20, 5)
    assert ledger.remaining(GRANT) == 75
