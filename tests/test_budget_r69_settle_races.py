"""Settling by hand under races and at edges (review R69 hunt): two processes settling one
reservation or one call at once, a settlement after its grant was revoked, and a quota window at
its exact boundary. Real components: a Gate over a SQLite file, the CLI run as two separate
processes against it (``python -m agentgate``), ``QuotaCounter`` on a real store.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_budgets import Books
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.capabilities import Call
from agentgate.policy import QuotaRef
from agentgate.store import SQLiteStore
from agentgate.store.held import settle_held
from agentgate.store.quotas import QuotaCounter

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _at_once(*argvs: list[str]) -> list[int]:
    """Run each ``agentgate`` command line as its own process, all started before any is
    waited for; their exit codes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "agentgate", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for argv in argvs
    ]
    codes = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), (out, err)  # done or refused: never an error
        codes.append(proc.returncode)
    return codes


def test_two_processes_settling_one_reservation_at_once_settle_it_once(tmp_path: Path) -> None:
    """Review R69 (hunt, sound): ``budget settle --ran`` and ``--not-run`` of one reservation
    from two processes at once: one settles it, the other is refused; the budget is charged
    or released once and one hand outcome is written."""
    path = tmp_path / "agentgate.db"
    books = Books(path)
    try:
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
        (reservation, _unit, amount), *_ = auth.reservations
        books.gate.flush()
    finally:
        books.gate.close()
    settle = ["budget", "settle", reservation, "--older-than", "0", "--store", str(path)]
    codes = _at_once([*settle, "--ran", "--by", "a"], [*settle, "--not-run", "--by", "b"])
    assert sorted(codes) == [0, 1]
    with SQLiteStore(path) as store:
        ((state,),) = store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,))
        ((spent, remaining, cap),) = store.query("SELECT spent, remaining, cap FROM budget_ledger")
        outcomes = store.query(
            'SELECT COUNT(*) FROM audit_log WHERE CAST(entry AS TEXT) LIKE \'%"kind":"outcome"%\''
        )
    ran = codes[0] == 0
    assert state == ("committed" if ran else "released")
    assert (spent, remaining) == ((amount, cap - amount) if ran else (0, cap))
    assert outcomes == [(1,)]


def test_two_processes_settling_one_call_at_once_settle_it_once(tmp_path: Path) -> None:
    """Review R69 (hunt, sound): ``tasks settle`` of one once-only call from two processes at
    once: one settles it, the other is refused; the call is charged once."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.once_key is not None
        gate.flush()
    settle = ["tasks", "settle", auth.once_key, "--ran", "--older-than", "0", "--store", str(path)]
    assert sorted(_at_once([*settle, "--by", "a"], [*settle, "--by", "b"])) == [0, 1]
    with _gate(path, keys) as gate:
        assert gate.ledger.spent(agent.grant_id) == 1
        assert [e.status for e in gate.audit.entries() if e.kind == "outcome"] == ["ok"]
        assert gate.verify().ok


def test_a_reservation_of_a_revoked_grant_is_settled_by_hand_and_by_its_late_outcome(tmp_path: Path) -> None:
    """Review R69 (hunt, sound): the grant revoked after its call was allowed: the held
    reservation is still settled by hand (a revocation stops new calls, not the books), and the
    call's late outcome trues up its charge as for any grant."""
    books = Books(tmp_path / "agentgate.db")
    gate, bot = books.gate, books.bot
    try:
        auth = gate.authorize(bot, Call.model("big"), tokens=(1000, 1000))
        (reservation, _unit, amount), *_ = auth.reservations
        gate.flush()
        gate.revoke(bot, by="ops")
        assert not gate.authorize(bot, Call.model("big"), tokens=(1, 1)).allowed
        settle_held(gate.store, gate.audit, reservation, ran=True, by="ops", min_age_s=0)
        assert gate.ledger.spent(bot.grant_id) == amount
        gate.run(auth, lambda: "t", spent=lambda _: (17_000, 1000))  # 66,000 usd_micros
        gate.flush()
        assert gate.ledger.spent(bot.grant_id) == 66_000
        assert gate.verify().ok
    finally:
        gate.close()


def test_a_quota_window_ends_exactly_at_its_boundary(tmp_path: Path) -> None:
    """Review R69 (hunt, sound): windows are ``[k * window_s, (k + 1) * window_s)``: a count at
    the last representable instant before the boundary is the old window's, one at the boundary
    itself the new window's, which starts from zero."""
    window, t0 = 60, 1_800_000_000.0
    quota = QuotaRef("calls-per-minute", "tenant:team", window, 1, "calls")
    with SQLiteStore(tmp_path / "q.db") as store:
        counter = QuotaCounter(store)
        before = t0 + window - 2.4e-7  # the float just below the boundary at this magnitude
        assert before < t0 + window
        for now, refused in ((t0, None), (before, quota), (t0 + window, None), (t0 + window + 59.9, quota)):
            with store.transaction() as tx:
                assert counter.count(tx, [quota], {"calls": 1}, now) == refused, now
        assert counter.used(quota, before) == 1 and counter.used(quota, t0 + window) == 1
