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
    """A reservation held, which nothing the test does to an odd id (``NUL`` here) may settle."""
    reservation = ledger.reserve(None, [GRANT], {GRANT: 10}, 3)
    yield reservation
    assert ledger.reservation(reservation).state == "reserved"
    assert ledger.remaining(GRANT) == 7


def settling_is_not_held(store: Store, ledger: BudgetLedger, odd: str, match: str) -> None:
    """Every way to settle reservation ``odd`` raises ``NotHeld`` matching ``match``."""
    for settle_it in (
        lambda tx: ledger.release(odd, tx),
        lambda tx: ledger.commit(odd, 1, tx),
        lambda tx: ledger.charge(odd, 1, tx, exhaust=True),
        lambda tx: ledger.charge_released(odd, 1, tx),
        lambda tx: ledger.charge_more(odd, 5, tx),
    ):
        with store.transaction() as tx, pytest.raises(NotHeld, match=match):
            settle_it(tx)
    with pytest.raises(NotHeld, match="does not exist or is already settled"):
        ledger.release(odd)


def reading_finds_none(store: Store, ledger: BudgetLedger, held: str, odd: str, match: str) -> None:
    """Reading reservation ``odd`` raises ``InputError`` matching ``match`` and finds it nowhere."""
    with pytest.raises(InputError, match=match):
        ledger.reservation(odd)
    with store.transaction() as tx:
        assert ledger.settled(odd, tx) is None
        assert ledger.still_held([held, odd], tx) == {held}
        assert ledger.still_held([odd], tx) == set()
        assert not ledger.merge(held, odd, tx)
        assert not ledger.merge(odd, held, tx)


def tasks_settle_skips(store: Store, odd: str) -> None:
    """``store.once.settle`` of a call whose row names reservation ``odd`` settles the rest."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), store) as gate:
        agent: AgentIdentity = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)  # its worker then died
        assert auth.allowed and auth.once_key is not None
        (first, _unit, amount), *_ = auth.reservations
        with store.transaction() as tx:
            gate.once.start(tx, auth.once_key, auth.audit_index, [first, odd])
        gate.flush()
        settle(store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        outcome = list(gate.audit.entries())[-1]
        assert (outcome.kind, outcome.status, outcome.ref) == ("outcome", "ok", auth.audit_index)
        assert outcome.budget_delta == amount and gate.ledger.spent(agent.grant_id) == amount
        assert store.query("SELECT state FROM agentgate_once") == [("ok",)]
        assert gate.verify().ok


def test_settling_an_id_with_nul_is_not_held(store: Store, ledger: BudgetLedger, held: str) -> None:
    settling_is_not_held(store, ledger, NUL, r"reservation '0{16}\\x00")


def test_reading_an_id_with_nul_finds_no_reservation(store: Store, ledger: BudgetLedger, held: str) -> None:
    reading_finds_none(store, ledger, held, NUL, r"^reservation '0{16}\\x000{15}' does not exist$")


def test_tasks_settle_skips_a_reservation_id_with_nul_on_both_stores(store: Store) -> None:
    tasks_settle_skips(store, NUL)
