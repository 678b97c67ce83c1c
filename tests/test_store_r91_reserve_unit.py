"""``BudgetLedger.reserve`` refuses a ``unit`` that is neither ``None`` nor a budget unit name
(``BUDGET_UNIT``) with an ``InputError`` naming it, nothing written, with the same answer on both
stores (review R91). Until then the unit was stored as given: ``5`` as ``'5'``, read back as no
unit (``stored_unit``), so a settlement of the reservation wrote no ``charges``; one holding a NUL
character was stored on SQLite and refused on PostgreSQL with a ``StoreError`` (a store failure,
to a caller that fails closed). The Gate passes the policy's units, so only a library caller
could hand one.

Real components: each store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.held import held
from agentgate.store.ledger import BudgetLedger

GRANT = "a" * 64


@pytest.mark.parametrize(
    "unit",
    ["usd\x00micros", 5, b"calls", "USD", "", "calls\n", "u" * 33, "2fa"],
    ids=["nul", "int", "bytes", "upper-case", "empty", "line-break", "too-long", "digit-first"],
)
def test_a_unit_that_is_no_unit_name_is_refused_and_nothing_is_reserved(store: Store, unit: object) -> None:
    ledger = BudgetLedger(store)
    with pytest.raises(InputError, match=r"^unit must be None or a budget unit name \(.*\), got "):
        ledger.reserve(None, [GRANT], {GRANT: 100}, 1, unit=unit)  # type: ignore[arg-type]
    assert store.query("SELECT COUNT(*) FROM budget_reservations")[0][0] == 0
    assert ledger.remaining(GRANT) is None  # no budget row made either


@pytest.mark.parametrize("unit", ["usd_micros", "tokens", "calls", "micro_usd", None])
def test_a_unit_name_or_none_is_stored_and_read_back(store: Store, unit: str | None) -> None:
    BudgetLedger(store).reserve(None, [GRANT], {GRANT: 100}, 1, unit=unit)
    [reservation] = held(store, None, min_age_s=0)
    assert reservation.unit == unit
