"""Review R88: on PostgreSQL no half-open probe claim is taken once another process's failed
probe has reopened the breaker, as on SQLite.

``SharedBreakers.probe_guard`` read the breaker's row in one statement and ``try_acquire`` read
the slots and claimed one in later statements; at READ COMMITTED each sees what committed before
it. A failed probe's ``release(before=SharedBreakers.reopen(...))`` (the opening and the freed
claim in one transaction) that committed in between left the guard's reading stale and the claim
free: the second process claimed and probed a backend that had just failed, while the store said
it opened 0 s ago. The guard now reads the row ``FOR SHARE``: the reopening waits for the claim's
transaction, which finds the claim still held.

Deterministic: the failed probe's release is let in right after the guard's read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from test_store_r88_bucket_takers_queue import WAIT_S, _done_or_waiting_for_a_lock, stores  # noqa: F401 (fixture)

from agentgate.store import Store, Transaction
from agentgate.store.leases import Lease, LeaseManager, SharedBreakers

pytestmark = pytest.mark.postgres

KEY = "tool:pay"
RESET_S = 30.0


def claim_as_a_failed_probe_reopens(
    other: LeaseManager,
    guard: Callable[[Transaction, float], bool],
    prober: LeaseManager,
    claim: Lease,
    reopened_at: float,
    watch: Store,
) -> Lease | None:
    """``other``'s claim of the single probe slot of ``KEY`` under ``guard``, with ``prober``'s failed
    probe (the release of ``claim`` that reopens the breaker at ``reopened_at``) let in right after
    the guard's read, which must find nothing against a probe."""
    releases: list[threading.Thread] = []

    def read_then_the_probe_fails(tx: Transaction, now: float) -> bool:
        free = guard(tx, now)
        assert free
        release = threading.Thread(
            target=prober.release,
            args=(claim,),
            kwargs={"before": SharedBreakers.reopen(KEY, reopened_at)},
        )
        release.start()
        releases.append(release)
        _done_or_waiting_for_a_lock(release, watch)
        return free

    got = other.try_acquire(SharedBreakers.probe_key(KEY), 1, guard=read_then_the_probe_fails)
    for release in releases:
        release.join(WAIT_S)
    return got


def test_no_probe_claim_is_taken_after_the_guard_read_and_before_a_failed_probe_reopened(
    stores: tuple[Store, Store, Store],  # noqa: F811 (the fixture)
) -> None:
    first, second, watch = stores
    prober = LeaseManager(first, ttl_s=30, holder="process-1")
    other = LeaseManager(second, ttl_s=30, holder="process-2")
    breakers = SharedBreakers(first)
    try:
        assert breakers.publish(KEY, "open", time.time() - 100)  # half-open by now everywhere
        claim = prober.try_acquire(
            SharedBreakers.probe_key(KEY), 1, guard=SharedBreakers.probe_guard(KEY, RESET_S)
        )
        assert claim is not None
        reopened_at = time.time()
        guard = SharedBreakers.probe_guard(KEY, RESET_S)
        # opened 100 s ago: the store says nothing against a probe yet
        assert claim_as_a_failed_probe_reopens(other, guard, prober, claim, reopened_at, watch) is None
        state = breakers.read(KEY)
        assert state is not None and (state.state, state.opened_at) == ("open", reopened_at)
        assert prober.rows(SharedBreakers.probe_key(KEY)) == []  # the failed probe's claim is free
        # and the store says opened just now, so no process claims it
        assert other.try_acquire(SharedBreakers.probe_key(KEY), 1, guard=guard) is None
    finally:
        prober.close()
        other.close()


def test_a_probe_claim_asked_while_a_failed_probe_reopens_waits_and_is_refused(
    stores: tuple[Store, Store, Store],  # noqa: F811 (the fixture)
) -> None:
    """The other order, two probes allowed: the guard read while the reopening is written but not
    committed read the row as it was (half-open) and took the second slot; it now waits for the
    reopening's commit and reads it."""
    first, second, watch = stores
    prober = LeaseManager(first, ttl_s=30, holder="process-1")
    other = LeaseManager(second, ttl_s=30, holder="process-2")
    breakers = SharedBreakers(first)
    guard = SharedBreakers.probe_guard(KEY, RESET_S)
    try:
        assert breakers.publish(KEY, "open", time.time() - 100)
        claim = prober.try_acquire(SharedBreakers.probe_key(KEY), 2, guard=guard)
        assert claim is not None
        reopened_at = time.time()
        reopen = SharedBreakers.reopen(KEY, reopened_at)
        asked: list[object] = []
        asking: list[threading.Thread] = []

        def reopen_then_another_asks(tx: Transaction) -> None:
            reopen(tx)
            ask = threading.Thread(
                target=lambda: asked.append(other.try_acquire(SharedBreakers.probe_key(KEY), 2, guard=guard))
            )
            ask.start()
            _done_or_waiting_for_a_lock(ask, watch)
            asking.append(ask)

        prober.release(claim, before=reopen_then_another_asks)
        for ask in asking:
            ask.join(WAIT_S)
        assert asked == [None]
        assert other.held() == 0
    finally:
        prober.close()
        other.close()
