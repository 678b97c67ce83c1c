"""Merging two held reservations (a lease's renewals) when one is settled meanwhile moves nothing
(review R66).

``BudgetLedger.merge`` read both reservations, then added ``other``'s amount to ``into`` and
settled ``other``, each statement conditional on the reservation still being held, but neither
checked that it changed a row. On PostgreSQL (READ COMMITTED) a settlement committed between the
read and the updates made one of them change nothing: ``other`` released meanwhile had its
amount refunded and also moved into ``into``, whose own settlement then gave it back a second
time (a budget above its cap: more to spend than the grant was signed for). The interleaving is
made deterministic: the settling transaction holds ``into``'s row lock while ``merge`` reads,
and commits once ``merge`` waits for that lock. Real components: a PostgreSQL server, two
connections.
"""

from __future__ import annotations

import threading
import time

import pytest

from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

pytestmark = pytest.mark.postgres

CAP = 100


def test_a_merge_racing_a_release_never_gives_a_budget_more_than_its_cap(postgres_url: str) -> None:
    """Review R66: a merge whose ``other`` was released meanwhile returned True and moved the
    amount already refunded; the budget ended above its cap. It returns False, moves nothing, and
    the budget ends at its cap once ``into`` is released too."""
    from agentgate.store._postgres import PostgresStore

    merger, settler = PostgresStore(postgres_url), PostgresStore(postgres_url)
    grant = f"merge-race-{time.time_ns()}"
    try:
        ledger, other_ledger = BudgetLedger(merger), BudgetLedger(settler)
        into = ledger.reserve(None, [grant], {grant: CAP}, 30)
        other = ledger.reserve(None, [grant], {grant: CAP}, 20)
        assert ledger.remaining(grant) == 50
        merged: list[bool] = []
        with settler.transaction() as tx:
            # Hold ``into``'s row (as a settlement of it would) and release ``other``.
            tx.execute("UPDATE budget_reservations SET amount = amount WHERE id = ?", (into,))
            other_ledger.release(other, tx)

            def merge() -> None:
                with merger.transaction() as mtx:
                    merged.append(ledger.merge(into, other, mtx))

            worker = threading.Thread(target=merge)
            worker.start()
            _until_waiting(settler, worker)
        worker.join(30)
        assert merged == [False]
        assert ledger.reservation(into).amount == 30
        assert ledger.reservation(other).state == "released"
        ledger.release(into)
        assert ledger.remaining(grant) == CAP
    finally:
        merger.close()
        settler.close()


def _until_waiting(store: Store, worker: threading.Thread) -> None:
    """Return once another session waits for a lock (``merge`` at its update of ``into``)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and worker.is_alive():
        waiting = store.query(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        if waiting[0][0]:
            return
        time.sleep(0.02)
    pytest.fail("merge never waited for the settling transaction's lock")
