"""Review R88 (second fix): on PostgreSQL no half-open probe claim is taken once another
process's failed probe has reopened the breaker, also when the breaker had no row before.

R88's first fix read the breaker's row ``FOR SHARE`` in the probe guard, which locks only a row
that exists. While no process had published the breaker (a probe's claim is taken on the local
breaker's half-open), the failed probe's release (``SharedBreakers.reopen``: INSERT of the row,
then the freed claim, one transaction) waited for nothing and committed between the guard's read
and the claim, and the second process claimed and probed the backend that had just failed. The
guard and every write of the row now take the breaker's advisory lock first.

Deterministic: the failed probe's release is let in right after the guard's read.
"""

from __future__ import annotations

import threading
import time

import pytest
from test_store_r88_bucket_takers_queue import WAIT_S, _done_or_waiting_for_a_lock, stores  # noqa: F401 (fixture)
from test_store_r88_probe_claim_after_reopen import KEY, RESET_S, claim_as_a_failed_probe_reopens

from agentgate.store import Store
from agentgate.store.leases import LeaseManager, SharedBreakers

pytestmark = pytest.mark.postgres


def test_a_failed_probe_writing_the_breakers_first_row_is_ordered_with_another_claim(
    stores: tuple[Store, Store, Store],  # noqa: F811 (the fixture)
) -> None:
    first, second, watch = stores
    prober = LeaseManager(first, ttl_s=30, holder="process-1")
    other = LeaseManager(second, ttl_s=30, holder="process-2")
    breakers = SharedBreakers(first)
    guard = SharedBreakers.probe_guard(KEY, RESET_S)
    try:
        assert breakers.read(KEY) is None  # no process has published this breaker
        claim = prober.try_acquire(SharedBreakers.probe_key(KEY), 1, guard=guard)
        assert claim is not None
        reopened_at = time.time()
        # no row: the store says nothing against a probe yet
        assert claim_as_a_failed_probe_reopens(other, guard, prober, claim, reopened_at, watch) is None
        state = breakers.read(KEY)
        assert state is not None and (state.state, state.opened_at) == ("open", reopened_at)
        assert prober.rows(SharedBreakers.probe_key(KEY)) == []  # the failed probe's claim is free
        assert other.try_acquire(SharedBreakers.probe_key(KEY), 1, guard=guard) is None
    finally:
        prober.close()
        other.close()


def test_a_claim_asked_while_a_first_publication_of_open_is_written_waits_and_is_refused(
    stores: tuple[Store, Store, Store],  # noqa: F811 (the fixture)
) -> None:
    """The other order: a guard that read while another process's first publication of the
    breaker's opening was written but not committed found no row and took a slot; it now waits
    for the publication's commit and reads it."""
    first, second, watch = stores
    other = LeaseManager(second, ttl_s=30, holder="process-2")
    guard = SharedBreakers.probe_guard(KEY, RESET_S)
    asked: list[object] = []
    try:
        with first.transaction() as tx:
            SharedBreakers.reopen(KEY, time.time())(tx)
            ask = threading.Thread(
                target=lambda: asked.append(other.try_acquire(SharedBreakers.probe_key(KEY), 1, guard=guard))
            )
            ask.start()
            _done_or_waiting_for_a_lock(ask, watch)
        ask.join(WAIT_S)
        assert asked == [None]
        assert other.held() == 0
    finally:
        other.close()
