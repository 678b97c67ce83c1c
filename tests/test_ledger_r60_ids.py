"""The budget ledger (agentgate/store/ledger.py) given a reservation id that is not text: a list or
a dict, as read from a JSON body, names no reservation; settling or reading one is a typed
refusal that changes nothing, and the reservation meant stays open, settled once."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

CHAIN = ["root", "agent"]
CAPS = {"root": 1000, "agent": 200}


@pytest.mark.parametrize("wrapped", [list, lambda r: {"id": r}])
def test_a_reservation_id_that_is_not_text_is_refused_and_settles_nothing(
    store: Store, wrapped: object
) -> None:
    """Review R60: commit/release of a reservation id that is a list raised TypeError (unhashable)."""
    ledger = BudgetLedger(store)
    reservation = ledger.reserve(None, CHAIN, CAPS, 50)
    bad = wrapped(reservation)  # type: ignore[operator]
    with pytest.raises(InputError, match="a reservation id is text"):
        ledger.commit(bad, 10)
    with pytest.raises(InputError, match="a reservation id is text"):
        ledger.release(bad)
    with pytest.raises(InputError, match="does not exist"):
        ledger.reservation(bad)
    with store.transaction() as tx:
        assert ledger.merge(bad, reservation, tx) is False
        assert ledger.merge(reservation, bad, tx) is False
    assert ledger.reservation(reservation).state == "reserved"
    assert ledger.usage("agent") == (0, 50)
    ledger.commit(reservation, 10)
    assert ledger.usage("agent") == (10, 0) and ledger.remaining("root") == 990
