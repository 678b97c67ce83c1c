"""Settling by hand (agentgate/store/held.py, agentgate/store/once.py) what a host whose clock ran
ahead left held, or what was stamped before this host's clock was stepped back: ``--older-than 0``
(``min_age_s=0``) bounds nothing, so such a reservation or call is listed and settled now, not only
once this clock has passed its stamp; any other age still refuses what is that young."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_cli_r58_held import _cli, _held, _killed_worker
from test_gate_once import PAY, RUN, _policy_text
from test_gate_once import _new as _once_new

from agentgate.audit.entry import format_time
from agentgate.errors import SettlementRefused
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store import once as once_module
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.held import held, settle_held
from agentgate.store.ledger import BudgetLedger

AHEAD = timedelta(hours=2)


def test_a_reservation_stamped_ahead_of_this_clock_is_listed_and_settled_at_age_zero(
    sqlite_store: SQLiteStore,
) -> None:
    """Review R60: a reservation stamped ahead (skewed host) was never listed or settled, even at 0."""
    store = sqlite_store
    ledger, log = BudgetLedger(store), AuditLog(store, open_log_key(store))
    reservation = ledger.reserve(None, ["agent"], {"agent": 100}, 7)
    ahead = format_time(datetime.now(UTC) + AHEAD)  # as a host whose clock runs ahead stamps it
    store.query("UPDATE budget_reservations SET created = ? WHERE id = ?", (ahead, reservation))
    assert held(store, log, min_age_s=1) == []  # any age but 0: too young, as before
    with pytest.raises(SettlementRefused, match="may still be running"):
        settle_held(store, log, reservation, ran=False, by="ops-1", min_age_s=1)
    (found,) = held(store, log, min_age_s=0)
    assert (found.id, found.amount, found.reserved_at) == (reservation, 7, ahead)
    settle_held(store, log, reservation, ran=True, by="ops-1", min_age_s=0)
    assert ledger.usage("agent") == (7, 0) and held(store, log, min_age_s=0) == []


def test_a_once_only_call_allowed_before_the_clock_stepped_back_is_settled_at_age_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R60: tasks settle --older-than 0 refused a call allowed 'in the future' of this clock."""
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        _killed_worker(gate, agent, PAY, call_id="c1", run_id=RUN)
        ((key,),) = gate.store.query("SELECT key FROM agentgate_once")
    stepped_back = time.time() - AHEAD.total_seconds()
    monkeypatch.setattr(once_module.time, "time", lambda: stepped_back)
    code, out = _cli("tasks", "settle", key, "--ran", "--older-than", "1", "--store", str(path))
    assert code == 1 and "may still be running" in out
    code, out = _cli("tasks", "settle", key, "--ran", "--older-than", "0", "--store", str(path))
    assert code == 0, out
    assert _held(str(path), "--older-than", "0") == []
