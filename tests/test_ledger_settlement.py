"""The Gate's per-call shortcuts (performance round, p2) keep what they replaced: each test shows
the slow path's behaviour where the shortcut cannot hold, on both stores.

- ``BudgetLedger`` settles a reservation it made itself without reading the row back (it names
  the chain and amount it stored in the UPDATE); any other reservation is read back as before.
- A reservation against one grant's budget writes nothing when it refuses, so the Gate records
  such an allow without a savepoint.
- Outcomes carried by a decision are written without a savepoint; when one cannot be written,
  the transaction is rolled back whole and the outcomes are written one by one under savepoints
  (the one that fails is logged, the others and the decision commit).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.errors import BudgetExceeded, InputError, StoreError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.ledger import BudgetLedger

CHAIN = ("g-root", "g-tip")
CAPS = {"g-root": 1000, "g-tip": 300}


def _rows(store: Store) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    ledger = store.query("SELECT grant_id, cap, remaining, spent FROM budget_ledger ORDER BY grant_id")
    held = store.query("SELECT id, chain, amount, state, actual FROM budget_reservations ORDER BY id")
    return [tuple(r) for r in ledger], [tuple(r) for r in held]


def test_a_reservation_settles_alike_by_the_ledger_that_made_it_and_by_another(store: Store) -> None:
    """The same reservations settled by the ledger that remembers them and by a fresh ledger (which
    reads them back) leave the same rows: commit at less, commit at more, release."""
    made, other = BudgetLedger(store), BudgetLedger(store)
    states = []
    for settler in (made, other):
        store.query("DELETE FROM budget_reservations")
        store.query("DELETE FROM budget_ledger")
        a = made.reserve(None, CHAIN, CAPS, 100)
        b = made.reserve(None, CHAIN, CAPS, 50)
        c = made.reserve(None, CHAIN, CAPS, 20)
        assert settler.commit(a, 60) == 0
        assert settler.commit(b, 80) == 0
        settler.release(c)
        ledger, held = _rows(store)
        states.append(
            (ledger, [(chain, amount, state, actual) for _id, chain, amount, state, actual in held])
        )
        for reservation in (a, b, c):  # settled once: a second settlement is refused either way
            with pytest.raises(InputError, match="already settled"):
                settler.release(reservation)
    assert states[0] == states[1]
    assert states[0][0] == [("g-root", 1000, 860, 140), ("g-tip", 300, 160, 140)]


def test_a_reservation_whose_transaction_rolled_back_is_not_settled(store: Store) -> None:
    """The ledger remembers a reservation whose transaction then rolled back: settling it is still
    refused (the row does not exist), and nothing changes."""
    ledger = BudgetLedger(store)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        gone = ledger.reserve(tx, CHAIN, CAPS, 100)
        raise RuntimeError("rolled back")
    before = _rows(store)
    with pytest.raises(InputError, match="does not exist"):
        ledger.commit(gone, 10)
    with pytest.raises(InputError, match="does not exist"):
        ledger.release(gone)
    assert _rows(store) == before


def test_a_reservation_settled_by_another_process_is_not_settled_again(store: Store) -> None:
    """Settled elsewhere (another ledger, standing for another process) while this ledger still
    remembers it: this ledger's settlement is refused and changes nothing."""
    mine, theirs = BudgetLedger(store), BudgetLedger(store)
    reservation = mine.reserve(None, CHAIN, CAPS, 100)
    theirs.commit(reservation, 40)
    before = _rows(store)
    with pytest.raises(InputError, match="already settled"):
        mine.commit(reservation, 100)
    assert _rows(store) == before


def test_a_single_budget_refusal_writes_nothing_in_the_callers_transaction(store: Store) -> None:
    """``BudgetExceeded`` from a reservation against one grant leaves the transaction as it was:
    no ledger row made for a budget smaller than the amount, none changed for one that lacks it;
    the caller's transaction goes on and commits its other writes."""
    ledger = BudgetLedger(store)
    ledger.reserve(None, ("g-small",), {"g-small": 10}, 8)
    before = _rows(store)
    with store.transaction() as tx:
        with pytest.raises(BudgetExceeded, match="g-new"):
            ledger.reserve(tx, ("g-new",), {"g-new": 5}, 6)  # a new grant whose cap is below the amount
        with pytest.raises(BudgetExceeded, match="g-small"):
            ledger.reserve(tx, ("g-small",), {"g-small": 10}, 3)  # 2 left
        kept = ledger.reserve(tx, ("g-small",), {"g-small": 10}, 2)
    ledger_rows, held = _rows(store)
    assert ("g-new", 5, 5, 0) not in ledger_rows and not any(r[0] == "g-new" for r in ledger_rows)
    assert ledger_rows == [("g-small", 10, 0, 0)]
    assert [r[0] for r in held] == sorted([*(r[0] for r in before[1]), kept])


POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: model:small
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 600
"""


def _gate(store: Store, budget: int = 10_000) -> tuple[Gate, AgentIdentity]:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = POLICY.format(budget=budget, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="p2.yaml"), store, log_key=SigningKey.generate())
    return gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")


def test_an_outcome_that_cannot_be_written_does_not_take_the_others_or_the_decision(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Two outcomes wait to be carried by a decision; the first cannot be written (its reservation
    was settled meanwhile). The decision commits, the second outcome is recorded, the first is
    logged as not recorded, and the log verifies."""
    gate, agent = _gate(store, 10_000)
    model = Call.model("small")
    try:
        with gate._store_lock:  # no background commit in between: the next decision carries both
            first = gate.authorize(agent, model, tokens=(10, 10))
            second = gate.authorize(agent, model, tokens=(10, 10))
            gate.run(first, lambda: "a", spent=lambda _: (5, 5))
            gate.run(second, lambda: "b", spent=lambda _: (5, 5))
            gate.ledger.release(first.reservations[0][0])  # settled elsewhere: its outcome cannot be
            with caplog.at_level(logging.ERROR, logger="agentgate.gate"):
                third = gate.authorize(agent, model, tokens=(10, 10))
        assert third.allowed and third.audit_index is not None
        gate.flush()
        outcomes = {e.ref: e for e in gate.audit.entries() if e.kind == "outcome"}
        assert first.audit_index not in outcomes
        assert outcomes[second.audit_index].status == "ok" and outcomes[second.audit_index].budget_delta == 10
        assert [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()] == [
            f"agentgate: outcome of audit entry {first.audit_index} not recorded: "
            f"reservation {first.reservations[0][0]!r} does not exist or is already settled"
        ]
        # The allow of the third call is in the log right after the second's outcome.
        assert gate.audit.entry(third.audit_index).kind == "allow"
        assert gate.verify().ok
        # The first call's reservation was released (by hand), the second charged 10, the third holds 20.
        assert gate.ledger.remaining(agent.chain.root.id) == 10_000 - 10 - 20
    finally:
        gate.close()


def test_a_refused_budget_without_a_savepoint_is_recorded_and_the_next_call_runs(store: Store) -> None:
    """An allow against the caller's one budget is recorded without a savepoint: a call the budget
    cannot hold is a recorded refusal (budget exhausted), the outcomes its decision carried are
    recorded, and a call that fits is allowed after it."""
    gate, agent = _gate(store, 100)
    model = Call.model("small")
    try:
        fits = gate.authorize(agent, model, tokens=(30, 30))
        assert fits.allowed
        gate.run(fits, lambda: "a", spent=lambda _: (30, 30))
        refused = gate.authorize(agent, model, tokens=(30, 30))  # 60 of the 40 left
        assert not refused.allowed and refused.budget_exhausted
        entry = gate.audit.entry(refused.audit_index or 0)
        assert entry.kind == "deny" and "budget exhausted (60 of 100 usd_micros spent" in entry.reasons[0]
        after = gate.authorize(agent, model, tokens=(20, 20))
        assert after.allowed
        gate.run(after, lambda: "b", spent=lambda _: (20, 20))
        gate.flush()
        assert gate.ledger.spent(agent.chain.root.id) == 100
        assert gate.ledger.remaining(agent.chain.root.id) == 0
        assert gate.verify().ok
    finally:
        gate.close()


def test_a_store_failure_while_carrying_outcomes_keeps_them(tmp_path: Path) -> None:
    """A store failure (not an outcome's own) while outcomes are carried fails the decision as
    before, and the outcomes stay pending for the next commit."""
    store = SQLiteStore(tmp_path / "p2.db")
    gate, agent = _gate(store, 10_000)
    model = Call.model("small")
    try:
        auth = gate.authorize(agent, model, tokens=(10, 10))
        with gate._store_lock:
            gate.run(auth, lambda: "a", spent=lambda _: (5, 5))
            conn = store.connect()
            conn.execute("BEGIN IMMEDIATE")  # another writer holds the lock past the busy timeout
            try:
                for idle in store._idle:
                    idle.execute("PRAGMA busy_timeout=50")
                with pytest.raises(StoreError):
                    gate.authorize(agent, model, tokens=(10, 10))
            finally:
                conn.execute("ROLLBACK")
                conn.close()
                for idle in store._idle:
                    idle.execute("PRAGMA busy_timeout=30000")
        gate.flush()
        assert [e.ref for e in gate.audit.entries() if e.kind == "outcome"] == [auth.audit_index]
    finally:
        gate.close()
