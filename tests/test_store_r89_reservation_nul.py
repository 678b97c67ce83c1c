"""A reservation id holding a NUL character is one no reservation has, with the same answer on
both stores (review R89): no id agentgate makes (32 hexadecimal digits) holds one, and
PostgreSQL's text cannot. Until then SQLite said it does not exist (``NotHeld``, ``InputError``,
``None``, none held) and PostgreSQL refused it with a ``StoreError`` (the store failing, to a
caller that fails closed), and ``agentgate tasks settle`` (``store.once.settle``) of a call
whose row names one settled it on SQLite and exited 2 on PostgreSQL. Review R85 made grant ids
agree the same way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_gate_once import PAY, RUN, _policy_text

from agentgate.errors import InputError, NotHeld
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import settle

GRANT = "a" * 64
NUL = "0" * 16 + "\x00" + "0" * 15


@pytest.fixture
def ledger(store: Store) -> BudgetLedger:
    return BudgetLedger(store)


@pytest.fixture
def held(ledger: BudgetLedger) -> Iterator[str]:
    """A reservation held, which nothing the test does to ``NUL`` may settle."""
    reservation = ledger.reserve(None, [GRANT], {GRANT: 10}, 3)
    yield reservation
    assert ledger.reservation(reservation).state == "reserved"
    assert ledger.remaining(GRANT) == 7


def test_settling_an_id_with_nul_is_not_held(store: Store, ledger: BudgetLedger, held: str) -> None:
    for settle_it in (
        lambda tx: ledger.release(NUL, tx),
        lambda tx: ledger.commit(NUL, 1, tx),
        lambda tx: ledger.charge(NUL, 1, tx, exhaust=True),
        lambda tx: ledger.charge_released(NUL, 1, tx),
        lambda tx: ledger.charge_more(NUL, 5, tx),
    ):
        with store.transaction() as tx, pytest.raises(NotHeld, match=r"reservation '0{16}\\x00"):
            settle_it(tx)
    with pytest.raises(NotHeld, match="does not exist or is already settled"):
        ledger.release(NUL)


def test_reading_an_id_with_nul_finds_no_reservation(store: Store, ledger: BudgetLedger, held: str) -> None:
    with pytest.raises(InputError, match=r"^reservation '0{16}\\x000{15}' does not exist$"):
        ledger.reservation(NUL)
    with store.transaction() as tx:
        assert ledger.settled(NUL, tx) is None
        assert ledger.still_held([held, NUL], tx) == {held}
        assert ledger.still_held([NUL], tx) == set()
        assert not ledger.merge(held, NUL, tx)
        assert not ledger.merge(NUL, held, tx)


def test_tasks_settle_skips_a_reservation_id_with_nul_on_both_stores(store: Store) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), store) as gate:
        agent: AgentIdentity = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)  # its worker then died
        assert auth.allowed and auth.once_key is not None
        (first, _unit, amount), *_ = auth.reservations
        with store.transaction() as tx:
            gate.once.start(tx, auth.once_key, auth.audit_index, [first, NUL])
        gate.flush()
        settle(store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        outcome = list(gate.audit.entries())[-1]
        assert (outcome.kind, outcome.status, outcome.ref) == ("outcome", "ok", auth.audit_index)
        assert outcome.budget_delta == amount and gate.ledger.spent(agent.grant_id) == amount
        assert store.query("SELECT state FROM agentgate_once") == [("ok",)]
        assert gate.verify().ok
