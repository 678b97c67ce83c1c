"""A call settled by hand whose own outcome comes later with what it used (review R69).

Review R68 made a late outcome charge a call released by hand (``--not-run``) that did run. Two
cases were left: a call settled ``--ran`` (charged as reserved) that then reports using more
than its reservation was charged nothing more, and the budget said less was spent than was; and
a late outcome whose reservation row ``store prune`` had deleted said the reservation "was
settled before this outcome (by hand, or by another process)", not that the row was gone and
nothing was charged. Real components: a Gate over a SQLite file, ``store.held.settle_held`` as
``agentgate budget settle`` calls it, ``BudgetLedger.prune`` as ``agentgate store prune``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_budgets import POLICY, Books

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.held import settle_held

RESERVED = 18_000
"""What ``tokens=(1000, 1000)`` reserves of ``model:big`` ($3 / $15 per million): usd_micros."""


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def books(tmp_path: Path) -> Iterator[Books]:
    made = Books(tmp_path / "agentgate.db")
    yield made
    made.gate.close()


def _outcomes(gate: Gate, index: int | None) -> list[AuditEntry]:
    return [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == index]


def _settled_by_hand(books: Books, *, ran: bool) -> tuple[Authorization, str]:
    gate = books.gate
    auth = gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
    assert auth.allowed, auth.reasons
    (reservation, _unit, amount), *_ = auth.reservations
    assert amount == RESERVED
    gate.flush()
    settle_held(gate.store, gate.audit, reservation, ran=ran, by="ops", min_age_s=0)
    return auth, reservation


def _charged_by_outcomes(gate: Gate, grant_id: str) -> int:
    """A grant's spend as the log's ``charges`` say (docs/audit-format.md: their sum)."""
    return sum(
        (e.charges or {}).get(grant_id, {}).get("usd_micros", 0)
        for e in gate.audit.entries()
        if e.kind == "outcome"
    )


def test_a_call_settled_as_ran_that_used_more_is_charged_the_rest_by_its_late_outcome(books: Books) -> None:
    """Review R69: a model call settled ``--ran`` by hand (charged its 18,000 reserved) whose
    late outcome reports 66,000 used: nothing more was charged, and the budget said 18,000. The
    late outcome charges the 48,000 more, its ``charges`` and ``budget_delta`` say so (the
    log's charges still sum to the grant's spend), and its reason says why."""
    gate, grant = books.gate, books.bot.grant_id
    auth, reservation = _settled_by_hand(books, ran=True)
    gate.run(auth, lambda: "t", spent=lambda _: (17_000, 1000))  # 51,000 + 15,000 (output: max 1000)
    gate.flush()
    late = _outcomes(gate, auth.audit_index)[-1]
    assert gate.ledger.spent(grant) == 66_000, "the call's use past its hand charge was never charged"
    assert late.charges == {grant: {"usd_micros": 48_000}}
    assert late.budget_delta == 48_000
    assert _charged_by_outcomes(gate, grant) == gate.ledger.spent(grant)
    assert any(f"reservation {reservation} was charged as reserved" in r for r in late.reasons), late.reasons
    assert gate.ledger.reservation(reservation).actual == 66_000
    assert gate.verify().ok


def test_a_late_true_up_takes_what_is_left_and_records_the_overrun(books: Books) -> None:
    """Review R69: as above, the call reporting 150,000 used on a 100,000 budget: the late
    outcome charges what is left (82,000), never more, and names the overrun."""
    gate, grant = books.gate, books.bot.grant_id
    auth, _reservation = _settled_by_hand(books, ran=True)
    gate.run(auth, lambda: "t", spent=lambda _: (45_000, 1000))  # 135,000 + 15,000 usd_micros
    gate.flush()
    late = _outcomes(gate, auth.audit_index)[-1]
    assert gate.ledger.spent(grant) == 100_000 and gate.ledger.remaining(grant) == 0
    assert late.charges == {grant: {"usd_micros": 82_000}}
    assert any("overran the usd_micros budget by 50000" in r for r in late.reasons), late.reasons
    assert _charged_by_outcomes(gate, grant) == gate.ledger.spent(grant)


def test_a_call_settled_as_ran_that_used_less_keeps_the_hand_charge_and_says_so(books: Books) -> None:
    """Review R69: the call settled ``--ran`` reports 1,800 used, less than the 18,000 charged
    by hand. The hand's charge stands (an outcome's ``charges`` are amounts >= 0 that sum to the
    spend: no refund can be written), and the late outcome says so instead of "settled before"."""
    gate, grant = books.gate, books.bot.grant_id
    auth, reservation = _settled_by_hand(books, ran=True)
    gate.run(auth, lambda: "t", spent=lambda _: (100, 100))  # 300 + 1,500 usd_micros
    gate.flush()
    late = _outcomes(gate, auth.audit_index)[-1]
    assert gate.ledger.spent(grant) == RESERVED
    assert late.charges is None and late.budget_delta == 0
    assert any(
        f"reservation {reservation} was charged as reserved (18000) by hand" in r and "not refunded" in r
        for r in late.reasons
    ), late.reasons
    assert _charged_by_outcomes(gate, grant) == gate.ledger.spent(grant)


@pytest.mark.parametrize("ran", [True, False])
def test_a_late_outcome_of_a_pruned_reservation_says_it_was_pruned_and_nothing_charged(
    books: Books, ran: bool
) -> None:
    """Review R69: a reservation settled by hand, its row then deleted by ``store prune``: the
    call's late outcome said it "was settled before this outcome (by hand, or by another
    process)", which hides that a call released by hand ran uncharged. It says the row was
    pruned, that this outcome charged nothing, and where to look (``audit explain``)."""
    gate, grant = books.gate, books.bot.grant_id
    auth, reservation = _settled_by_hand(books, ran=ran)
    assert gate.ledger.prune(time.time() + 60) == 1
    gate.run(auth, lambda: "t", spent=lambda _: (1000, 1000))
    gate.flush()
    late = _outcomes(gate, auth.audit_index)[-1]
    assert gate.ledger.spent(grant) == (RESERVED if ran else 0)
    assert late.charges is None and late.budget_delta == 0
    (said,) = [r for r in late.reasons if reservation in r]
    assert "pruned" in said and "nothing was charged" in said, said
    assert f"agentgate audit explain {auth.audit_index}" in said, said
    assert "by hand, or by another process" not in said, said
    assert gate.verify().ok


def test_on_either_store_a_late_outcome_trues_up_a_hand_charge_and_names_a_pruned_row(store: Store) -> None:
    """Review R69: as above, on SQLite and on PostgreSQL (the conditional update from a commit
    as reserved, the late charge under its savepoint, the read of a pruned row): one call
    settled ``--ran`` that used 66,000 is charged the rest; another settled ``--not-run``, its
    row pruned, is charged nothing and its outcome says the row was pruned."""
    keys = {n: SigningKey.generate() for n in ("root", "bot", "kid")}
    gate = Gate(parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="b.yaml"), store)
    try:
        bot = gate.issue(keys["root"], name="bot", key=keys["bot"], role="worker")
        ran = gate.authorize(bot, Call.model("big"), tokens=(1000, 1000))
        pruned = gate.authorize(bot, Call.model("big"), tokens=(1000, 1000))
        gate.flush()
        settle_held(gate.store, gate.audit, pruned.reservations[0][0], ran=False, by="ops", min_age_s=0)
        assert gate.ledger.prune(time.time() + 60) == 1
        settle_held(gate.store, gate.audit, ran.reservations[0][0], ran=True, by="ops", min_age_s=0)
        gate.run(ran, lambda: "t", spent=lambda _: (17_000, 1000))
        gate.run(pruned, lambda: "t", spent=lambda _: (1000, 1000))
        gate.flush()
        assert gate.ledger.spent(bot.grant_id) == 66_000  # the one trued up; the pruned one nothing
        (said,) = [r for r in _outcomes(gate, pruned.audit_index)[-1].reasons if "pruned" in r]
        assert "nothing was charged" in said
        assert gate.verify().ok
    finally:
        gate.close()


def test_a_late_outcome_whose_budget_was_pruned_with_its_expired_grant_says_so(books: Books) -> None:
    """Review R69: a call released by hand whose grant then expired long ago, its budget row
    pruned (``store prune``: no reservation held it any more); the call's late outcome charged
    nothing (right: that budget is gone) but said the row was "deleted outside agentgate?",
    sending an operator after an intruder. It names the prune of an expired grant's budget."""
    gate, grant = books.gate, books.bot.grant_id
    auth, _reservation = _settled_by_hand(books, ran=False)
    with gate.store.transaction() as tx:  # a day past its expiry: as if the call took that long
        tx.execute("UPDATE agentgate_grants SET expires = ? WHERE id = ?", (int(time.time()) - 86_400, grant))
    assert gate.ledger.prune_expired(time.time()) == 1
    gate.run(auth, lambda: "t", spent=lambda _: (1000, 1000))
    gate.flush()
    late = _outcomes(gate, auth.audit_index)[-1]
    assert late.charges is None
    (said,) = [r for r in late.reasons if "budget_ledger" in r]
    assert "agentgate store prune" in said and "expired" in said, said
