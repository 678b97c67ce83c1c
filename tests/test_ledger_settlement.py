"""Settling budgets (``BudgetLedger``, agentgate/store/ledger.py): a reservation is taken from and
given back to every grant of its chain, settled once across processes, and an overrun is charged
to the cap and its shortfall reported whole. The Gate's per-call shortcuts keep what they
replaced: those tests show the slow path's behaviour where the shortcut cannot hold, on both stores.

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentgate.capabilities import Call
from agentgate.errors import BudgetExceeded, InputError, StoreError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.ledger import MAX_AMOUNT, BudgetLedger

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
    """Two outcomes wait to be carried by a decision; the first cannot be written as it is (its
    reservation was settled meanwhile). The decision commits, the second outcome is recorded,
    the first too, without its reservation (review R67: until then logged as not recorded and
    dropped), and the log verifies."""
    gate, agent = _gate(store, 10_000)
    model = Call.model("small")
    try:
        with gate._store_lock:  # no background commit in between: the next decision carries both
            first = gate.authorize(agent, model, tokens=(10, 10))
            second = gate.authorize(agent, model, tokens=(10, 10))
            gate.run(first, lambda: "a", spent=lambda _: (5, 5))
            gate.run(second, lambda: "b", spent=lambda _: (5, 5))
            # Settled elsewhere (charged as reserved): its outcome cannot be written as it is.
            gate.ledger.commit(first.reservations[0][0], 20)
            with caplog.at_level(logging.WARNING, logger="agentgate.gate"):
                third = gate.authorize(agent, model, tokens=(10, 10))
        assert third.allowed and third.audit_index is not None
        gate.flush()
        outcomes = {e.ref: e for e in gate.audit.entries() if e.kind == "outcome"}
        assert outcomes[first.audit_index].budget_delta == 0 and outcomes[first.audit_index].charges is None
        assert outcomes[second.audit_index].status == "ok" and outcomes[second.audit_index].budget_delta == 10
        assert [r.getMessage() for r in caplog.records if "already settled" in r.getMessage()] == [
            f"agentgate: outcome of audit entry {first.audit_index}: "
            f"reservation {first.reservations[0][0]!r} does not exist or is already settled"
        ]
        # The allow of the third call is in the log right after the second's outcome.
        assert gate.audit.entry(third.audit_index).kind == "allow"
        assert gate.verify().ok
        # The first call's reservation was charged 20 (by hand), the second 10, the third holds 20.
        assert gate.ledger.remaining(agent.chain.root.id) == 10_000 - 20 - 10 - 20
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


# --- reserving and settling across a chain of grants ---------------------------------------------


def test_an_exhausted_overrun_returns_the_largest_shortfall_of_the_chain(store: Store) -> None:
    """Mutant: ``shortfall`` took the last grant's shortfall instead of the largest (max).

    Rule: what a call cost beyond its budgets is the most any grant of its chain could not
    cover; a later link that covered more must not hide the root's larger shortfall."""
    ledger = BudgetLedger(store)
    held = ledger.reserve(None, ["root", "tip"], {"root": 10, "tip": 12}, 5)
    # Overrun of 15: the root has 5 left (short by 10), the tip 7 (short by 8).
    assert ledger.commit(held, 20, exhaust=True) == 10
    assert [ledger.remaining(g) for g in ("root", "tip")] == [0, 0]


def test_an_exhausted_overrun_counts_the_reservation_and_the_rest_as_spent(store: Store) -> None:
    """Mutant: the exhaust path added only the overrun charged to ``spent``, not the reservation.

    Rule: a call that ran and cost more than a budget had leaves that budget spent to its cap
    (the reservation plus all that was left), so ``spent`` matches what the budget lost."""
    ledger = BudgetLedger(store)
    held = ledger.reserve(None, ["root", "tip"], {"root": 10, "tip": 12}, 5)
    ledger.commit(held, 20, exhaust=True)
    assert [ledger.spent(g) for g in ("root", "tip")] == [10, 12]
    assert [ledger.usage(g) for g in ("root", "tip")] == [(10, 0), (12, 0)]


@pytest.mark.parametrize("second", ["commit", "release"])
def test_a_reservation_settled_by_another_process_is_never_settled_again(store: Store, second: str) -> None:
    """Mutant: the settling UPDATE of a reservation this ledger made dropped ``state = 'reserved'``
    (or trusted its memory of the reservation without the row count).

    Rule: a reservation is settled exactly once across processes. Another process (a second
    ``BudgetLedger`` on the same store) committed it; settling it again here must raise and
    refund nothing, or the budget is spent twice over."""
    mine, theirs = BudgetLedger(store), BudgetLedger(store)
    held = mine.reserve(None, ["root", "tip"], {"root": 10, "tip": 8}, 6)
    theirs.commit(held, 6)
    with pytest.raises(InputError, match="already settled"):
        if second == "commit":
            mine.commit(held, 0)
        else:
            mine.release(held)
    assert [mine.remaining(g) for g in ("root", "tip")] == [4, 2]
    assert [mine.spent(g) for g in ("root", "tip")] == [6, 6]
    with pytest.raises(BudgetExceeded):
        mine.reserve(None, ["root", "tip"], {"root": 10, "tip": 8}, 3)


def test_a_release_returns_the_amount_to_every_link(store: Store) -> None:
    """Mutant: ``release`` skipped the root of the chain.

    Rule: a released reservation gives its whole amount back to every grant it was taken from,
    root included."""
    ledger = BudgetLedger(store)
    caps = {"root": 10, "mid": 9, "tip": 8}
    held = ledger.reserve(None, ["root", "mid", "tip"], caps, 7)
    ledger.release(held)
    assert [ledger.remaining(g) for g in caps] == [10, 9, 8]
    assert [ledger.usage(g) for g in caps] == [(0, 0)] * 3


def test_a_chain_naming_a_grant_twice_is_refused_and_reserves_nothing(store: Store) -> None:
    """Mutant: ``reserve`` dropped the check that a chain's grant ids are distinct.

    Rule: a chain is a list of distinct grants, root first; one naming a grant twice is bad input
    (``InputError``), and no budget is touched (it would be charged twice per call)."""
    ledger = BudgetLedger(store)
    ledger.reserve(None, ["root"], {"root": 10}, 1)
    with pytest.raises(InputError, match="distinct"):
        ledger.reserve(None, ["root", "tip", "root"], {"root": 10, "tip": 10}, 3)
    assert ledger.remaining("root") == 9
    assert ledger.remaining("tip") is None


def test_amounts_beyond_any_budget_are_refused_and_reported_whole(store: Store) -> None:
    """Mutants: ``reserve`` dropped its check of the 64-bit bound; ``commit`` with ``exhaust``
    dropped the part of an actual amount beyond that bound from the shortfall it returns.

    Rule: an amount no budget column can hold is a typed ``BudgetExceeded`` (not a driver
    error) that reserves nothing; a call that ran and cost more is charged all its budget had,
    and the whole rest of its cost is returned as the shortfall to record, none of it lost."""
    ledger = BudgetLedger(store)
    with pytest.raises(BudgetExceeded, match="more than any budget"):
        ledger.reserve(None, ["g"], {"g": 10}, MAX_AMOUNT + 1)
    assert ledger.remaining("g") is None
    held = ledger.reserve(None, ["g"], {"g": 10}, 5)
    cost = MAX_AMOUNT + 100
    assert ledger.commit(held, cost, exhaust=True) == cost - 10
    assert ledger.remaining("g") == 0 and ledger.spent("g") == 10


class _Between:
    """A real transaction that runs ``meanwhile`` (another connection's committed work) right after
    its first conditional overrun charge matched no row: the moment READ COMMITTED lets another
    transaction's refund land between two statements of ``BudgetLedger._commit``."""

    def __init__(self, tx: Any, meanwhile: Callable[[], None]) -> None:
        self.tx, self.meanwhile, self.fired = tx, meanwhile, False

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.tx.execute(sql, params)
        if not self.fired and "AND remaining >= ?" in sql and self.tx.rowcount == 0:
            self.fired = True
            self.meanwhile()
        return rows

    @property
    def rowcount(self) -> int:
        return int(self.tx.rowcount)


@pytest.mark.postgres
def test_an_exhausting_commit_charges_only_the_overrun_when_a_refund_lands_meanwhile(
    postgres_url: str,
) -> None:
    """Kills L4 (``BudgetLedger._commit``: ``charged = left`` instead of ``min(left, -delta)``).

    On SQLite (one writer) the two are the same; on PostgreSQL a refund committed by another
    process between the failed conditional charge and the locking read makes ``left`` larger
    than the overrun, and the mutant charged all of it: a call that cost 800 of a 1000 budget
    was booked as 1000 spent, and the other process's refund vanished."""
    from agentgate.store._postgres import PostgresStore

    one, two = PostgresStore(postgres_url), PostgresStore(postgres_url)
    try:
        ledger, other = BudgetLedger(one), BudgetLedger(two)
        caps = {"g" * 64: 1000}
        first = ledger.reserve(None, ["g" * 64], caps, 600)
        second = ledger.reserve(None, ["g" * 64], caps, 300)
        assert ledger.remaining("g" * 64) == 100
        with one.transaction() as tx:
            between = _Between(tx, lambda: other.release(second))
            shortfall = ledger.commit(first, 800, between, exhaust=True)  # type: ignore[arg-type]
        assert between.fired
        assert shortfall == 0  # the overrun of 200 fit once the refund of 300 was in
        assert ledger.remaining("g" * 64) == 200
        assert ledger.spent("g" * 64) == 800
    finally:
        one.close()
        two.close()


def test_a_reservation_beyond_a_new_grants_cap_writes_nothing(sqlite_store: SQLiteStore) -> None:
    """Kills L2 (``_reserve``: ``cap < amount - 1``): a reservation one unit above the cap of a
    grant never used then created the grant's row before refusing, so a caller that goes on in
    its transaction (as ``reserve`` allows) committed a write for a refused reservation."""
    ledger = BudgetLedger(sqlite_store)
    with sqlite_store.transaction() as tx, pytest.raises(BudgetExceeded):
        ledger.reserve(tx, ["c" * 64], {"c" * 64: 100}, 101)
    assert ledger.remaining("c" * 64) is None
