"""A reservation id or grant id holding a lone surrogate (text that is not UTF-8) is one no
reservation or budget has, on both stores (review R89b), as review R89 made an id holding a NUL:
no id agentgate makes (hexadecimal) holds one and neither store can. Until then the ledger's
``reservation``, ``release``, ``settled``, ``still_held`` and ``merge`` raised a ``StoreError``
for it (the store failing, to a caller that fails closed) where they say "does not exist", and
``agentgate tasks settle`` (``store.once.settle``) of a call whose row names one (JSON
``"\\ud800"`` reads back as one) exited with a store error where a NUL settled."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from test_gate_once import PAY, RUN, _policy_text

from agentgate.errors import InputError, MalformedRow, NotHeld
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger, stored_reservation
from agentgate.store.once import settle

GRANT = "a" * 64
LONE = "0" * 16 + "\ud800" + "0" * 15


@pytest.fixture
def ledger(store: Store) -> BudgetLedger:
    return BudgetLedger(store)


@pytest.fixture
def held(ledger: BudgetLedger) -> Iterator[str]:
    """A reservation held, which nothing the test does to ``LONE`` may settle."""
    reservation = ledger.reserve(None, [GRANT], {GRANT: 10}, 3)
    yield reservation
    assert ledger.reservation(reservation).state == "reserved"
    assert ledger.remaining(GRANT) == 7


def test_settling_an_id_with_a_lone_surrogate_is_not_held(
    store: Store, ledger: BudgetLedger, held: str
) -> None:
    for settle_it in (
        lambda tx: ledger.release(LONE, tx),
        lambda tx: ledger.commit(LONE, 1, tx),
        lambda tx: ledger.charge(LONE, 1, tx, exhaust=True),
        lambda tx: ledger.charge_released(LONE, 1, tx),
        lambda tx: ledger.charge_more(LONE, 5, tx),
    ):
        with store.transaction() as tx, pytest.raises(NotHeld, match=r"reservation '0{16}\\ud800"):
            settle_it(tx)
    with pytest.raises(NotHeld, match="does not exist or is already settled"):
        ledger.release(LONE)


def test_reading_an_id_with_a_lone_surrogate_finds_no_reservation(
    store: Store, ledger: BudgetLedger, held: str
) -> None:
    with pytest.raises(InputError, match=r"^reservation '0{16}\\ud8000{15}' does not exist$"):
        ledger.reservation(LONE)
    with store.transaction() as tx:
        assert ledger.settled(LONE, tx) is None
        assert ledger.still_held([held, LONE], tx) == {held}
        assert ledger.still_held([LONE], tx) == set()
        assert not ledger.merge(held, LONE, tx)
        assert not ledger.merge(LONE, held, tx)


def test_a_grant_id_with_a_lone_surrogate_is_refused_as_one_with_nul(ledger: BudgetLedger, held: str) -> None:
    for read in (lambda: ledger.remaining("\ud800"), lambda: ledger.usage("\ud800")):
        with pytest.raises(
            InputError, match="a grant id must be non-empty text without a NUL character or lone"
        ):
            read()
    with pytest.raises(InputError, match="chain must be a non-empty list of distinct grant ids"):
        ledger.reserve(None, [GRANT, "\ud800"], {"\ud800": 10}, 1)


@pytest.mark.parametrize("grant", ["\ud800", "\x00"])
def test_a_stored_chain_naming_a_grant_id_no_budget_may_have_is_malformed(grant: str) -> None:
    with pytest.raises(MalformedRow, match="its chain is not a list of grant ids"):
        stored_reservation("r", json.dumps([GRANT, grant]), 3)  # "\\ud800", "\\u0000": ASCII JSON


def test_tasks_settle_skips_a_reservation_id_with_a_lone_surrogate_on_both_stores(store: Store) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), store) as gate:
        agent: AgentIdentity = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)  # its worker then died
        assert auth.allowed and auth.once_key is not None
        (first, _unit, amount), *_ = auth.reservations
        with store.transaction() as tx:
            gate.once.start(tx, auth.once_key, auth.audit_index, [first, LONE])
        gate.flush()
        settle(store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        outcome = list(gate.audit.entries())[-1]
        assert (outcome.kind, outcome.status, outcome.ref) == ("outcome", "ok", auth.audit_index)
        assert outcome.budget_delta == amount and gate.ledger.spent(agent.grant_id) == amount
        assert store.query("SELECT state FROM agentgate_once") == [("ok",)]
        assert gate.verify().ok
