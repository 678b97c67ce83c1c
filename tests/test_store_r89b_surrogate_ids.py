"""A reservation id or grant id holding a lone surrogate (text that is not UTF-8) is one no
reservation or budget has, on both stores (review R89b), as review R89 made an id holding a NUL:
no id agentgate makes (hexadecimal) holds one and neither store can. Until then the ledger's
``reservation``, ``release``, ``settled``, ``still_held`` and ``merge`` raised a ``StoreError``
for it (the store failing, to a caller that fails closed) where they say "does not exist", and
``agentgate tasks settle`` (``store.once.settle``) of a call whose row names one (JSON
``"\\ud800"`` reads back as one) exited with a store error where a NUL settled."""

from __future__ import annotations

import json

import pytest
from test_store_r89_reservation_nul import (  # noqa: F401 (the fixtures)
    GRANT,
    held,
    ledger,
    reading_finds_none,
    settling_is_not_held,
    tasks_settle_skips,
)

from agentgate.errors import InputError, MalformedRow
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger, stored_reservation

LONE = "0" * 16 + "\ud800" + "0" * 15


def test_settling_an_id_with_a_lone_surrogate_is_not_held(
    store: Store,
    ledger: BudgetLedger,  # noqa: F811 (the fixture)
    held: str,  # noqa: F811 (the fixture)
) -> None:
    settling_is_not_held(store, ledger, LONE, r"reservation '0{16}\\ud800")


def test_reading_an_id_with_a_lone_surrogate_finds_no_reservation(
    store: Store,
    ledger: BudgetLedger,  # noqa: F811 (the fixture)
    held: str,  # noqa: F811 (the fixture)
) -> None:
    reading_finds_none(store, ledger, held, LONE, r"^reservation '0{16}\\ud8000{15}' does not exist$")


def test_a_grant_id_with_a_lone_surrogate_is_refused_as_one_with_nul(
    ledger: BudgetLedger,  # noqa: F811 (the fixture)
    held: str,  # noqa: F811 (the fixture)
) -> None:
    for read in (lambda: ledger.remaining("\ud800"), lambda: ledger.usage("\ud800")):
        with pytest.raises(
            InputError, match="a grant id must be non-empty text without a NUL character or lone"
        ):
            read()
    with pytest.raises(InputError, match="chain must be a non-empty list or tuple of distinct grant ids"):
        ledger.reserve(None, [GRANT, "\ud800"], {"\ud800": 10}, 1)


@pytest.mark.parametrize("grant", ["\ud800", "\x00"])
def test_a_stored_chain_naming_a_grant_id_no_budget_may_have_is_malformed(grant: str) -> None:
    with pytest.raises(MalformedRow, match="its chain is not a list of grant ids"):
        stored_reservation("r", json.dumps([GRANT, grant]), 3)  # "\\ud800", "\\u0000": ASCII JSON


def test_tasks_settle_skips_a_reservation_id_with_a_lone_surrogate_on_both_stores(store: Store) -> None:
    tasks_settle_skips(store, LONE)
