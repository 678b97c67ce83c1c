"""Settling by hand with a minimum age too large for a float (review R88, third regression pass).

``held.settle_held`` (``agentgate budget settle``) and ``once.settle`` (``agentgate tasks
settle``) take ``min_age_s`` as an int or a float >= 0. An int such as ``10**400`` passes that
check, and the "may still be running" refusal wrote it with ``:.0f``, which converts it to a
float: a bare ``OverflowError`` out of the refusal, where ``inf`` and ``1e300`` were refused with
``SettlementRefused``. The refusal now writes such an age as the power of two it is at least."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.errors import SettlementRefused
from agentgate.keys import SigningKey
from agentgate.store import Store, held, open_store
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import settle

HUGE = {"10**400": (10**400, "at least 2**1328 s"), "10**5000": (10**5000, "at least 2**16609 s")}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "s.db")
    yield opened
    opened.close()


@pytest.mark.parametrize(("age", "written"), list(HUGE.values()), ids=list(HUGE))
def test_settle_held_refuses_a_fresh_reservation_for_a_huge_int_age(
    store: Store, age: int, written: str
) -> None:
    audit = AuditLog(store, SigningKey.generate())
    reservation = BudgetLedger(store).reserve(None, ["g1"], {"g1": 10}, 4)
    with pytest.raises(
        SettlementRefused, match=rf"may still be running: settle it once it cannot be, {re.escape(written)}"
    ):
        held.settle_held(store, audit, reservation, ran=False, by="op", min_age_s=age)
    assert held.settle_held(store, audit, reservation, ran=False, by="op", min_age_s=0)[0].amount == 4


@pytest.mark.parametrize(("age", "written"), list(HUGE.values()), ids=list(HUGE))
def test_once_settle_refuses_a_started_call_for_a_huge_int_age(
    tmp_path: Path, age: int, written: str
) -> None:
    logging.disable(logging.CRITICAL)
    try:
        keys, path, agent = _new(tmp_path)
        with _gate(path, keys) as gate:
            auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
            gate.flush()
            assert auth.once_key is not None
            with pytest.raises(
                SettlementRefused,
                match=rf"may still be running: settle it once it cannot be, {re.escape(written)}",
            ):
                settle(gate.store, gate.audit, auth.once_key, ran=False, by="ops", min_age_s=age)
    finally:
        logging.disable(logging.NOTSET)
