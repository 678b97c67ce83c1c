"""A call settled by hand while it still ran, whose own outcome comes later (review R68).

``agentgate tasks settle`` and ``agentgate budget settle`` take a call allowed long enough ago
for dead; one that was only slow ends later and writes its own outcome (review R67: written past
the reservation the hand settled, never charged twice). Two things were still wrong:
a call settled ``--ran`` that then ended in ``error`` was marked ``error`` by its outcome and
listed by ``tasks unsettled`` again, though a person had settled it; and a call settled
``--not-run`` that did run was charged nothing (the release stood), so its grant's budget said
less was spent than was. Real components: a Gate over a SQLite file, ``store.once.settle`` and
``store.held.settle_held`` as the CLI calls them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_budgets import Books
from test_gate_once import PAY, RUN, _gate, _new, _policy_text

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.held import settle_held
from agentgate.store.once import OnceCalls, settle


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _outcomes(gate: Gate, index: int | None) -> list[AuditEntry]:
    return [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == index]


def _fail() -> None:
    raise RuntimeError("the payment service answered 502 after taking the payment")


def test_a_call_settled_as_ran_that_then_fails_is_not_unsettled_again(tmp_path: Path) -> None:
    """Review R68: a payment settled ``--ran`` by hand while it still ran, which then ended in an
    error: its late outcome marked the call ``error``, and ``tasks unsettled`` listed it again (a
    second settlement charged nothing). A hand's ``ran`` is confirmed by an ``error`` (the call
    started): the call stays settled, never run again, and its outcome is still written."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.allowed and auth.once_key is not None
        gate.flush()
        settle(gate.store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        with pytest.raises(RuntimeError):
            gate.run(auth, _fail, call_id="c1", run_id=RUN)
        gate.flush()
        assert [e.status for e in _outcomes(gate, auth.audit_index)] == ["ok", "error"]
        assert OnceCalls(gate.store).unsettled() == [], "a settled call is listed as unsettled again"
        again = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not again.allowed
        assert gate.ledger.spent(agent.grant_id) == 1  # charged once, by the hand
        assert gate.verify().ok


def test_a_call_released_by_hand_that_ran_is_charged_by_its_late_outcome(tmp_path: Path) -> None:
    """Review R68: a payment settled ``--not-run`` (its reservation released) that did run: its
    late ``ok`` outcome charged nothing, and the grant's budget showed 0 spent for a payment
    made. The outcome charges it as a call that ran (one call), its ``charges`` and
    ``budget_delta`` say so, and the reservation is recorded as committed."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.allowed and auth.once_key is not None
        (reservation, unit, amount), *_ = auth.reservations
        gate.flush()
        settle(gate.store, gate.audit, auth.once_key, ran=False, by="ops", min_age_s=0)
        assert gate.ledger.usage(agent.grant_id) == (0, 0)
        gate.run(auth, lambda: "paid", call_id="c1", run_id=RUN)
        gate.flush()
        late = _outcomes(gate, auth.audit_index)[-1]
        assert late.status == "ok"
        assert gate.ledger.usage(agent.grant_id) == (amount, 0), "a call that ran was never charged"
        assert late.budget_delta == amount
        assert late.charges == {agent.grant_id: {unit: amount}}
        assert any("released before this outcome" in r for r in late.reasons), late.reasons
        assert gate.ledger.reservation(reservation).state == "committed"
        assert gate.verify().ok


def test_a_late_charge_takes_what_is_left_and_records_the_overrun(tmp_path: Path) -> None:
    """Review R68: a model call released by hand while it ran, which then reports a usage far
    past its budget: its late outcome charged nothing. It charges what the budget has left
    (never more: ``spent`` stays within the cap) and names the overrun in its reasons, as an
    outcome that overruns its reservation does; the budget is exhausted, not silently wrong."""
    books = Books(tmp_path / "agentgate.db")
    gate, bot = books.gate, books.bot
    try:
        auth = gate.authorize(bot, Call.model("big"), tokens=(1000, 1000))
        assert auth.allowed, auth.reasons
        (reservation, unit, _amount), *_ = auth.reservations
        gate.flush()
        settle_held(gate.store, gate.audit, reservation, ran=False, by="ops", min_age_s=0)
        cap = gate.ledger.remaining(bot.grant_id)
        assert cap is not None
        gate.run(auth, lambda: "t", spent=lambda _: (1_000_000, 1_000_000))  # far past any budget
        gate.flush()
        late = _outcomes(gate, auth.audit_index)[-1]
        assert gate.ledger.remaining(bot.grant_id) == 0
        assert gate.ledger.spent(bot.grant_id) == cap  # all it had, not more
        assert late.charges == {bot.grant_id: {unit: cap}}
        assert any(f"overran the {unit} budget by" in r for r in late.reasons), late.reasons
        assert gate.verify().ok
    finally:
        gate.close()


def test_a_late_outcome_leaves_a_call_decided_again_since_as_it_is(tmp_path: Path) -> None:
    """Review R68: a payment settled ``--not-run`` and decided again (a second allow, running):
    the first run's late outcome set the call's state whatever allow it was for, so the second
    run, if its process then died, was no longer listed as unsettled. The row is the latest
    allow's: a late outcome of an earlier one leaves it ``started``."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        first = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert first.allowed and first.once_key is not None
        gate.flush()
        settle(gate.store, gate.audit, first.once_key, ran=False, by="ops", min_age_s=0)
        second = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert second.allowed
        gate.flush()
        gate.run(first, lambda: "paid", call_id="c1", run_id=RUN)
        gate.flush()
        (row,) = OnceCalls(gate.store).unsettled()
        assert (row.state, row.allow_index) == ("started", second.audit_index)
        assert gate.verify().ok


def test_on_either_store_a_call_settled_as_ran_stays_settled_and_a_released_one_is_charged(
    store: Store,
) -> None:
    """Review R68: as above, on SQLite and on PostgreSQL (the conditional state update and the
    late charge under its savepoint): a payment settled ``--ran`` that then fails is not listed
    again; another settled ``--not-run`` that ran is charged one call by its outcome."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    gate = Gate(parse_policy(_policy_text(keys), source="once.yaml"), store)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        ran = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        released = gate.authorize(agent, PAY, call_id="c2", run_id=RUN)
        assert ran.once_key is not None and released.once_key is not None
        gate.flush()
        settle(gate.store, gate.audit, ran.once_key, ran=True, by="ops", min_age_s=0)
        settle(gate.store, gate.audit, released.once_key, ran=False, by="ops", min_age_s=0)
        with pytest.raises(RuntimeError):
            gate.run(ran, _fail, call_id="c1", run_id=RUN)
        gate.run(released, lambda: "paid", call_id="c2", run_id=RUN)
        gate.flush()
        assert OnceCalls(gate.store).unsettled() == []
        assert gate.ledger.usage(agent.grant_id) == (2, 0)  # each payment once
        assert gate.verify().ok
    finally:
        gate.close()
