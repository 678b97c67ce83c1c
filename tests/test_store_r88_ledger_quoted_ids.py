"""The budget ledger and the dead letters quote a reservation id or a letter id in their errors as
``quoted`` does, cut at 60 characters (review R88), as the store's leases have since review R87.
Until then an unknown reservation's id was written whole into ``NotHeld`` and ``InputError`` (a
message of 1 MB for an id of 1 MB), one that is not text nested past the recursion limit was a
bare ``RecursionError``, and a corrupt dead letter's id was written whole into its
``StoreError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentgate.errors import InputError, NotHeld, StoreError
from agentgate.store import Store
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.ledger import BudgetLedger

LONG = "r" * 100_000
QUOTED = repr(LONG)[:57] + "..."


def _deep(levels: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(levels):
        nested = [nested]
    return nested


SETTLEMENTS: dict[str, tuple[Callable[[BudgetLedger, Store, Any], object], type[InputError]]] = {
    "release": (lambda ledger, store, rid: ledger.release(rid), NotHeld),
    "commit": (lambda ledger, store, rid: ledger.commit(rid, 1), NotHeld),
    "charge_released": (lambda ledger, store, rid: _in_tx(store, ledger.charge_released, rid), NotHeld),
    "charge_more": (lambda ledger, store, rid: _in_tx(store, ledger.charge_more, rid), NotHeld),
    "reservation": (lambda ledger, store, rid: ledger.reservation(rid), InputError),
}


def _in_tx(store: Store, settle: Callable[..., object], reservation: Any) -> object:
    with store.transaction() as tx:
        return settle(reservation, 5, tx)


@pytest.mark.parametrize("verb", list(SETTLEMENTS))
def test_an_unknown_reservation_is_quoted_cut(sqlite_store: Store, verb: str) -> None:
    settle, error = SETTLEMENTS[verb]
    ledger = BudgetLedger(sqlite_store)
    with pytest.raises(error) as raised:
        settle(ledger, sqlite_store, LONG)
    assert f"reservation {QUOTED} does not exist" in str(raised.value)
    assert len(str(raised.value)) < 200


@pytest.mark.parametrize("verb", ["release", "reservation"])
def test_a_reservation_id_nested_too_deep_to_write_is_refused_by_its_type(
    sqlite_store: Store, verb: str
) -> None:
    settle, _ = SETTLEMENTS[verb]
    ledger = BudgetLedger(sqlite_store)
    with pytest.raises(InputError, match="reservation a list nested too deep to write does not exist"):
        settle(ledger, sqlite_store, _deep(100_000))


def test_a_corrupt_dead_letter_quotes_its_id_cut(sqlite_store: Store) -> None:
    letters = DeadLetterStore(sqlite_store)
    with sqlite_store.transaction() as tx:
        tx.execute(
            "INSERT INTO agentgate_dead_letters VALUES (?, 1.0, 't', 'a', 'p', NULL, NULL, NULL, 'd', 'x', 'r', '[]')",
            (LONG,),
        )
    with pytest.raises(StoreError) as raised:
        letters.recent()
    assert str(raised.value) == (
        f"dead letter {QUOTED}: the stored authority_chain 'x' is not what a scheduler writes (a corrupt row)"
    )
