"""Outcomes settled by hand (``agentgate budget settle``: ``store/held.py``; ``agentgate tasks
settle``: ``store/once.py``) carry ``charges``: what each grant of the chain was charged, by
unit, as the Gate's outcomes do (docs/audit-format.md).

Until review R61 both committed with ``BudgetLedger.commit`` and wrote no ``charges``: a grant's
spend could not be rebuilt from the log once a reservation was settled by hand. A reservation row
did not store its unit; it now does (``budget_reservations.unit``), and a row made before (no
unit) settles as before, without ``charges``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_gate_once import PAY, RUN, _policy_text
from test_store_upgrade_nesting_and_rowids import OLD_LEDGER

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.held import held, settle_held
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import settle


@pytest.fixture
def gated(store: Store) -> Iterator[tuple[Gate, AgentIdentity]]:
    """A Gate whose agent has a budget of 100 calls (``pay`` runs once, ``lookup`` is idempotent)."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    gate = Gate(parse_policy(_policy_text(keys), source="once.yaml"), store)
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    yield gate, agent
    gate.close()


def test_a_held_reservation_settled_as_ran_records_its_charge(gated: tuple[Gate, AgentIdentity]) -> None:
    """Review R61: ``budget settle --ran`` of a lookup's held reservation (1 call) writes
    charges {grant: {calls: 1}} on its outcome."""
    gate, agent = gated
    auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))  # its worker then died
    gate.flush()
    _found, index = settle_held(
        gate.store, gate.audit, auth.reservations[0][0], ran=True, by="ops", min_age_s=0
    )
    outcome = gate.audit.entry(index)
    assert outcome.budget_delta == 1 and outcome.ref == auth.audit_index
    assert outcome.charges == {agent.grant_id: {"calls": 1}}
    assert gate.ledger.spent(agent.grant_id) == 1
    assert gate.verify().ok


def test_a_held_reservation_released_records_no_charges(gated: tuple[Gate, AgentIdentity]) -> None:
    """Review R61: ``budget settle --not-run`` charges nothing: no ``charges`` on its outcome."""
    gate, agent = gated
    auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
    gate.flush()
    _found, index = settle_held(
        gate.store, gate.audit, auth.reservations[0][0], ran=False, by="ops", min_age_s=0
    )
    assert gate.audit.entry(index).charges is None and gate.ledger.spent(agent.grant_id) == 0


def test_a_reservation_stored_without_its_unit_settles_without_charges(
    gated: tuple[Gate, AgentIdentity],
) -> None:
    """Review R61: a reservation made before its unit was stored (``unit`` null) is settled as
    before: charged, its outcome without ``charges`` (the unit is not known)."""
    gate, agent = gated
    auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
    gate.flush()
    with gate.store.transaction() as tx:
        tx.execute("UPDATE budget_reservations SET unit = NULL")
    _found, index = settle_held(
        gate.store, gate.audit, auth.reservations[0][0], ran=True, by="ops", min_age_s=0
    )
    outcome = gate.audit.entry(index)
    assert outcome.budget_delta == 1 and outcome.charges is None
    assert gate.ledger.spent(agent.grant_id) == 1


def test_a_once_only_call_settled_as_ran_records_its_charge(gated: tuple[Gate, AgentIdentity]) -> None:
    """Review R61: ``tasks settle --ran`` of a once-only call whose outcome was lost writes
    charges {grant: {calls: 1}} on its outcome."""
    gate, agent = gated
    assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed  # its worker then died
    gate.flush()
    (lost,) = gate.once.unsettled()
    settle(gate.store, gate.audit, lost.key, ran=True, by="ops", min_age_s=0)
    outcome = list(gate.audit.entries())[-1]
    assert outcome.kind == "outcome" and outcome.budget_delta == 1
    assert outcome.charges == {agent.grant_id: {"calls": 1}}
    assert gate.ledger.spent(agent.grant_id) == 1
    assert gate.verify().ok


def test_a_once_only_call_settled_as_not_run_records_no_charges(gated: tuple[Gate, AgentIdentity]) -> None:
    """Review R61: ``tasks settle --not-run`` releases the reservation: no ``charges``."""
    gate, agent = gated
    assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
    gate.flush()
    (lost,) = gate.once.unsettled()
    settle(gate.store, gate.audit, lost.key, ran=False, by="ops", min_age_s=0)
    outcome = list(gate.audit.entries())[-1]
    assert outcome.kind == "outcome" and outcome.charges is None


def test_a_ledger_made_before_stores_the_unit_of_new_reservations(store: Store) -> None:
    """Review R61: a store whose ``budget_reservations`` has no ``unit`` (nor ``entry``) column
    gains it when a ledger opens it, on SQLite and PostgreSQL; its held rows read null and new
    reservations store their unit."""
    with store.transaction() as tx:
        for statement in OLD_LEDGER.split(";"):
            if statement.strip():
                tx.execute(statement)
        tx.execute(
            "INSERT INTO budget_reservations (id, chain, amount, state, created) "
            "VALUES ('9d2e7c1a0b3f4e5d6c7b8a9f0e1d2c3b', '[\"root\"]', 3, 'reserved', '2026-11-29T18:00:00.000000Z')"
        )
    ledger = BudgetLedger(store)
    fresh = ledger.reserve(None, ["root"], {"root": 100}, 4, unit="tokens")
    rows = store.query("SELECT id, unit FROM budget_reservations ORDER BY created")
    assert rows == [("9d2e7c1a0b3f4e5d6c7b8a9f0e1d2c3b", None), (fresh, "tokens")]


def test_held_lists_each_reservations_unit(gated: tuple[Gate, AgentIdentity]) -> None:
    """Review R61: ``budget held`` (``held``, its ``--json``) names the unit a held reservation's
    amount is in, as stored (null for a row made before its unit was)."""
    gate, agent = gated
    auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
    gate.flush()
    (listed,) = held(gate.store, gate.audit, min_age_s=0)
    assert listed.id == auth.reservations[0][0]
    assert listed.unit == "calls" and listed.to_json()["unit"] == "calls"
    with gate.store.transaction() as tx:
        tx.execute("UPDATE budget_reservations SET unit = NULL")
    (listed,) = held(gate.store, gate.audit, min_age_s=0)
    assert listed.unit is None and listed.to_json()["unit"] is None
