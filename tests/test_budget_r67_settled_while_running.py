"""A call whose reservation was settled by hand while it still ran, then finished (review R67).

``agentgate tasks settle`` and ``agentgate budget settle`` settle a call allowed at least
``SETTLE_MIN_AGE_S`` (15 minutes) ago whose outcome is missing: its worker is taken for dead. A
call that runs longer is not dead: when it finishes, its outcome meets a reservation settled
already (``NotHeld``). Until review R67 that outcome was dropped (logged): the log never said
how the call ended, and a once-only call settled as not run stayed ``not_run``, so the same call
(a payment) was allowed to run a second time. Its outcome is now written, that reservation not
settled again (the hand's settlement stands, named in the reasons). Real components: a Gate over
a SQLite file, ``store.once.settle`` and ``store.held.settle_held`` as the CLI calls them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _gate, _new, _policy_text

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.held import settle_held
from agentgate.store.once import settle


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _outcomes(gate: Gate, index: int | None) -> list[AuditEntry]:
    return [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == index]


def test_a_once_only_call_settled_as_not_run_while_it_ran_is_never_allowed_again(tmp_path: Path) -> None:
    """Review R67: a payment settled by hand as not run while it still ran, then finished: its
    outcome was dropped (its reservation already settled), the call stayed ``not_run``, and the
    same call was allowed again: a second payment. Its ``ok`` outcome is written, the call is
    ``ok`` and refused when decided again. Since review R68 the call that ran is charged by its
    outcome (the hand's release no longer stands; tests/test_budget_r68_late_outcomes.py)."""
    keys, path, agent = _new(tmp_path)
    paid: list[int] = []
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.allowed and auth.once_key is not None
        gate.flush()
        settle(gate.store, gate.audit, auth.once_key, ran=False, by="ops", min_age_s=0)
        gate.run(auth, lambda: paid.append(40), call_id="c1", run_id=RUN)  # it was only slow
        gate.flush()
        assert not gate._outcome_refused_at and gate._outcomes.take() == []
        statuses = [e.status for e in _outcomes(gate, auth.audit_index)]
        assert statuses == ["not_run", "ok"], statuses  # the hand's, then the call's own
        (own,) = [e for e in _outcomes(gate, auth.audit_index) if e.status == "ok"]
        assert own.budget_delta == 1 and own.charges == {agent.grant_id: {"calls": 1}}
        assert any("released before this outcome" in r for r in own.reasons), own.reasons
        again = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not again.allowed, "the payment would run a second time"
        assert "already ran to completion" in again.explain()
        assert gate.verify().ok
    assert paid == [40]


def test_a_model_call_settled_by_hand_while_it_ran_still_gets_its_outcome(tmp_path: Path) -> None:
    """Review R67: ``budget settle --ran`` of a lookup's reservation while it ran: the call's own
    outcome was dropped. It is written (status as the call ended), charging nothing more: the
    grant was charged once, by the hand's settlement."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
        assert auth.allowed
        gate.flush()
        settle_held(gate.store, gate.audit, auth.reservations[0][0], ran=True, by="ops", min_age_s=0)
        gate.run(auth, lambda: "found")
        gate.flush()
        statuses = [e.status for e in _outcomes(gate, auth.audit_index)]
        assert statuses == ["ok", "ok"], statuses
        assert gate.ledger.spent(agent.grant_id) == 1  # once
        assert gate.verify().ok


def test_on_either_store_a_late_outcome_is_written_past_its_settled_reservation(store: Store) -> None:
    """Review R67: as above, on SQLite and on PostgreSQL (the savepoints the outcome is written
    under the second time): a lookup released by hand while it ran gets its own outcome, and
    (since review R68) its grant is charged the call that ran, once."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    gate = Gate(parse_policy(_policy_text(keys), source="once.yaml"), store)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
        gate.flush()
        settle_held(gate.store, gate.audit, auth.reservations[0][0], ran=False, by="ops", min_age_s=0)
        gate.run(auth, lambda: "found")
        gate.flush()
        assert [e.status for e in _outcomes(gate, auth.audit_index)] == ["not_run", "ok"]
        assert gate.ledger.usage(agent.grant_id) == (1, 0)
        assert gate.verify().ok
    finally:
        gate.close()
