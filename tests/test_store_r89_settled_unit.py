"""A reservation's stored unit that no budget can be in (a row edited outside agentgate) is never
written into the signed log as a unit charged, by any settlement (review R89).

``budget settle`` (``store.held.settle_held``) has refused such a unit since review R62: the
reservation is charged and its outcome carries no ``charges``. Until review R89 the other two
settlements wrote the row's text as it was into the outcome's ``charges``: ``tasks settle``
(``store.once.settle``) from ``budget_reservations.unit``, and a GPU lease's end
(``GatedBroker``) from its ``broker_decisions`` row's list of ``[reservation id, unit,
amount]``, where ``audit show`` and ``audit report`` then read that text as a unit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_broker_restart_budget import World, lease
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.store.once import settle

FORGED = [
    pytest.param("calls\nforged line " + "x" * 40, id="line-break"),
    pytest.param("c" * 5000, id="5000-characters"),
    pytest.param("Calls", id="upper-case"),
    pytest.param("", id="empty"),
]


@pytest.mark.parametrize("unit", FORGED)
def test_tasks_settle_charges_a_row_with_a_forged_unit_and_names_it_in_no_charges(
    tmp_path: Path, unit: str
) -> None:
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.allowed and auth.once_key is not None
        gate.flush()
        with gate.store.transaction() as tx:
            tx.execute("UPDATE budget_reservations SET unit = ?", (unit,))
        settle(gate.store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        outcome = list(gate.audit.entries())[-1]
        assert (outcome.kind, outcome.status, outcome.ref) == ("outcome", "ok", auth.audit_index)
        assert outcome.charges is None
        assert outcome.budget_delta == auth.reservations[0][2]  # charged as reserved all the same
        states = gate.store.query("SELECT state FROM budget_reservations")
        assert [s for (s,) in states] == ["committed"]
        assert gate.verify().ok


def test_tasks_settle_still_names_a_unit_a_budget_is_in(tmp_path: Path) -> None:
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.once_key is not None
        gate.flush()
        settle(gate.store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        charges = list(gate.audit.entries())[-1].charges
        assert charges is not None
        assert {u for by_unit in charges.values() for u in by_unit} == {auth.reservations[0][1]}


@pytest.mark.parametrize("unit", FORGED)
def test_a_lease_whose_decision_row_holds_a_forged_unit_ends_without_it_in_charges(
    tmp_path: Path, unit: str
) -> None:
    world = World(str(tmp_path / "agentgate.db"))
    try:
        gated = world.process.gated
        assert gated.submit(world.trainer, lease("ft-1")).allowed
        (decided,) = gated.decisions.all()
        forged = [[reservation, unit, amount] for reservation, _unit, amount in decided.reservations]
        with world.process.store.transaction() as tx:
            tx.execute("UPDATE broker_decisions SET reservations = ?", (json.dumps(forged),))
        world.clock.now += 10
        gated.release(world.trainer, "ft-1")
        released = world.process.entries()[-1]
        assert (released.status, released.charges) == ("lease_released", None)
        # Not a money unit it knows: charged all it reserved, as any unit not priced by time.
        assert released.budget_delta == 120_000 and world.spent() == 120_000
        assert world.process.gate.verify().ok
    finally:
        world.process.gate.close()
