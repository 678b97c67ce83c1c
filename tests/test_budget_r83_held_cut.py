"""Review R83: an age that puts its cut in a year of one to three digits (52,000,000,000 s, about
1,650 years) holds no reservation made now: the cut is written with a four-digit year
(``format_time``), as the times it is compared with as text. ``strftime`` wrote the year 379 as
``379-...``, which sorts after ``2026-...``: ``budget held --older-than`` listed a reservation
made a moment ago, and ``budget settle`` settled it while its call could still be running (the
fault R83 fixed first in ``BudgetLedger.prune``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentgate.audit.entry import format_time
from agentgate.errors import SettlementRefused
from agentgate.keys import SigningKey
from agentgate.store import open_store
from agentgate.store.audit import AuditLog
from agentgate.store.held import held, settle_held
from agentgate.store.ledger import BudgetLedger

GRANT = "ab" * 32
AGES = [3.0e10, 5.2e10, 6.2e10]  # cuts in the years 1075, 379 and 61


@pytest.mark.parametrize("age", AGES)
def test_a_reservation_made_now_is_not_that_old(tmp_path: Path, age: float) -> None:
    with open_store(tmp_path / "agentgate.db") as store:
        audit = AuditLog(store, SigningKey.generate())
        reservation = BudgetLedger(store).reserve(None, [GRANT], {GRANT: 100}, 5)
        assert [r.id for r in held(store, audit, min_age_s=0)] == [reservation]
        assert held(store, audit, min_age_s=age) == []
        with pytest.raises(SettlementRefused, match="may still be running"):
            settle_held(store, audit, reservation, ran=False, by="ops", min_age_s=age)
        assert [r.id for r in held(store, audit, min_age_s=0)] == [reservation]  # still held


def test_times_are_written_with_four_digit_years() -> None:
    assert format_time(datetime(379, 2, 12, 1, 2, 3, 4, tzinfo=UTC)) == "0379-02-12T01:02:03.000004Z"
    assert format_time(datetime(2026, 12, 6, 17, 0, tzinfo=UTC)) == "2026-12-06T17:00:00.000000Z"
