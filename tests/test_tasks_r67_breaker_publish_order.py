"""Review R67: a shared breaker row only moves forward in time.

``SharedBreakers.publish`` wrote unconditionally, so a publication that landed late (its process's
store worker was slow) overwrote a newer transition another process had written: a stale "open"
after another process's successful probe reopened the breaker everywhere, a stale "closed" after
a newer opening closed it everywhere on a failing backend. And a process adopted a row only when
its version was above the last one it had read, so after the store was restored from a backup
(versions back to lower numbers) it ignored the other processes' new transitions until the
version passed its old one.

Real stores (a SQLite file, a PostgreSQL server), two connections as two processes have; the late
publication is injected by running the publish job in the stale order, no sleep as synchronisation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.store import Store, open_store
from agentgate.store.leases import BREAKER_AHEAD_S, LeaseManager, SharedBreakers
from agentgate.tasks import Attempt, BreakerPolicy, BreakerState, Scheduler, SchedulerConfig, ToolCall

KEY = "tool:t"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two connections to one store: one per process."""
    if request.param == "sqlite":
        url = str(tmp_path / "agentgate.db")
    else:
        url = str(request.getfixturevalue("postgres_url"))
    first, second = open_store(url), open_store(url)
    yield first, second
    first.close()
    second.close()


def _config() -> SchedulerConfig:
    return SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=60.0))


async def _fail(attempt: Attempt) -> None:
    raise ConnectionError("down")


def _row(store: Store) -> tuple[str, float]:
    row = SharedBreakers(store).read(KEY)
    assert row is not None
    return row.state, row.opened_at


def test_a_late_open_does_not_overwrite_a_newer_close(stores: tuple[Store, Store]) -> None:
    """Review R67: process A's probe failed at t1 (its "open" waits for its store worker), B's
    probe succeeded at t2 > t1 and wrote "closed"; A's "open" then landed over it and every
    process reopened a breaker on a backend that works. Now the older transition is dropped."""
    a, b = SharedBreakers(stores[0]), SharedBreakers(stores[1])
    t0 = time.time()
    b.publish(KEY, "open", t0)
    b.publish(KEY, "closed", t0 + 2.0)  # B's probe succeeded
    a.publish(KEY, "open", t0 + 1.0)  # A's failed probe, written late
    assert _row(stores[1]) == ("closed", t0 + 2.0)


def test_a_late_close_does_not_overwrite_a_newer_open(stores: tuple[Store, Store]) -> None:
    """Review R67: a stale "closed" (A's probe succeeded at t1, written late) landed after B's
    calls opened the breaker at t2 > t1, and every process closed it on a failing backend."""
    a, b = SharedBreakers(stores[0]), SharedBreakers(stores[1])
    t0 = time.time()
    b.publish(KEY, "open", t0)
    b.publish(KEY, "open", t0 + 2.0)  # B's calls fail again
    a.publish(KEY, "closed", t0 + 1.0)  # A's probe success, written late
    assert _row(stores[1]) == ("open", t0 + 2.0)
    # A's failed probe's reopening at the same moment writes nothing (the version stays).
    version = b.read(KEY).version  # type: ignore[union-attr]
    with stores[0].transaction() as tx:
        SharedBreakers.reopen(KEY, t0 + 2.0)(tx)
    assert b.read(KEY).version == version  # type: ignore[union-attr]
    # At the same time, an opening outranks a closing (the safe direction), whatever the order.
    b.publish(KEY, "closed", t0 + 3.0)
    a.publish(KEY, "open", t0 + 3.0)
    assert _row(stores[0]) == ("open", t0 + 3.0)
    b.publish(KEY, "closed", t0 + 3.0)
    assert _row(stores[0]) == ("open", t0 + 3.0)


async def test_the_publish_job_written_late_leaves_the_newer_row(stores: tuple[Store, Store]) -> None:
    """Review R67: the same through the schedulers' publish job: A's "open" is queued, B's job
    writes its "closed" first, then A's job runs. B, reading the row, stays closed."""
    a, b = Scheduler(_config(), store=stores[0]), Scheduler(_config(), store=stores[1])
    try:
        t1 = time.time()
        assert a.shared.queue_publication(KEY, "open", t1, 1)
        assert b.shared.queue_publication(KEY, "closed", t1 + 1.0, 1)
        b._publish_in_order(KEY)
        a._publish_in_order(KEY)  # late
        assert _row(stores[1]) == ("closed", t1 + 1.0)
        await b._sync_breaker(b.breaker(KEY), asyncio.get_running_loop())
        assert b.breaker(KEY).state is BreakerState.CLOSED
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_restored_row_with_a_lower_version_still_passes_newer_transitions(
    stores: tuple[Store, Store],
) -> None:
    """Review R67: a process adopted a row only with a version above the last it had read. The
    store restored from a backup (the row back at version 1) then hid every new transition of the
    other processes from it until the version passed its old one. Now rows are ordered by their
    transition time: the restored, older row is not adopted, the next newer one is."""
    a = Scheduler(_config(), store=stores[0])
    other = SharedBreakers(stores[1])
    loop = asyncio.get_running_loop()
    breaker = a.breaker(KEY)
    try:
        t0 = time.time()
        for step, state in enumerate(("open", "closed", "open", "closed")):
            other.publish(KEY, state, t0 + step)
        await a._sync_breaker(breaker, loop)
        assert breaker.state is BreakerState.CLOSED
        with stores[1].transaction() as tx:  # the backup taken after the first opening
            tx.execute("UPDATE agentgate_breakers SET state = 'open', opened_at = ?, version = 1", (t0,))
        a._breaker_seen.clear()
        await a._sync_breaker(breaker, loop)
        assert breaker.state is BreakerState.CLOSED  # older than what A knows: not adopted
        other.publish(KEY, "open", t0 + 10.0)  # version 2, newer than anything before
        a._breaker_seen.clear()
        await a._sync_breaker(breaker, loop)
        assert breaker.state is BreakerState.OPEN
    finally:
        await a.aclose()


def test_a_row_dated_far_ahead_is_overwritten(stores: tuple[Store, Store]) -> None:
    """Review R67: with ordered publication, a row written by a host whose clock is an hour ahead
    would hold every other host's transitions off for that hour. A row more than
    ``BREAKER_AHEAD_S`` ahead of the writer's clock is taken as older than its transition."""
    a, b = SharedBreakers(stores[0]), SharedBreakers(stores[1])
    now = time.time()
    b.publish(KEY, "closed", now + 3600.0)
    a.publish(KEY, "open", now)
    assert _row(stores[1]) == ("open", now)
    b.publish(KEY, "closed", now + BREAKER_AHEAD_S / 2)  # within the bound: ordered by time
    a.publish(KEY, "open", now + 1.0)
    assert _row(stores[1]) == ("closed", now + BREAKER_AHEAD_S / 2)


def test_a_probe_is_not_held_off_by_an_opening_dated_far_ahead(stores: tuple[Store, Store]) -> None:
    """Review R67: an opening written by a host whose clock is an hour ahead refused every other
    process's probe claim for that hour plus the reset timeout (``probe_guard``), and if that host
    died no process could close the breaker before then. A row dated more than
    ``BREAKER_AHEAD_S`` ahead says nothing to the guard (the claims still bound the probes)."""
    SharedBreakers(stores[1]).publish(KEY, "open", time.time() + 3600.0)
    guard = SharedBreakers.probe_guard(KEY, 1.0)
    manager = LeaseManager(stores[0])
    try:
        assert manager.try_acquire(SharedBreakers.probe_key(KEY), 1, guard=guard) is not None
    finally:
        manager.close()


@pytest.mark.parametrize("when", [float("nan"), float("inf"), "1", True])
def test_a_transition_time_that_is_not_a_finite_number_is_refused(
    stores: tuple[Store, Store], when: object
) -> None:
    """Review R67: ordered by time, a NaN or infinite transition time would stand above every
    later one (on PostgreSQL NaN sorts above all numbers). ``publish`` refuses it, writing nothing."""
    shared = SharedBreakers(stores[0])
    with pytest.raises(InputError, match="transition time is a finite number"):
        shared.publish(KEY, "open", when)  # type: ignore[arg-type]
    assert shared.read(KEY) is None


async def _background_done(scheduler: Scheduler) -> None:
    """Wait for the scheduler's background jobs, yielding to its loop so that their done
    callbacks take them out of ``_background``. ``gather`` of futures already done returns
    without yielding from Python 3.12 (it completes eagerly), and a loop around it then spun
    forever (review R77, the suite on 3.13)."""
    await scheduler._landed(scheduler._background.copy())


async def test_a_transition_after_a_row_from_a_clock_ahead_is_written(stores: tuple[Store, Store]) -> None:
    """Review R67: a process's transition is dated by its clock. After adopting a row written by
    a host whose clock is 5 s ahead (well within what is tolerated), its own opening, made after it
    but dated before it, was dropped as older, and the process then adopted that older row and
    closed the breaker it had just opened. A transition made after one this process knows is
    dated after it (by at most ``BREAKER_AHEAD_S``), as it happened after it."""
    a = Scheduler(_config(), store=stores[0])
    loop = asyncio.get_running_loop()
    breaker = a.breaker(KEY)
    try:
        ahead = time.time() + 5.0
        SharedBreakers(stores[1]).publish(KEY, "closed", ahead)  # B's probe closed it
        await a._sync_breaker(breaker, loop)
        with pytest.raises(ConnectionError):  # then A's call fails: A opens it
            await a.submit(ToolCall("t"), _fail)
        assert breaker.state is BreakerState.OPEN
        while a._background:  # A's publish job, to its end
            await _background_done(a)
        state, opened_at = _row(stores[1])
        assert state == "open" and opened_at > ahead
        a._breaker_seen.clear()
        await a._sync_breaker(breaker, loop)
        assert breaker.state is BreakerState.OPEN
    finally:
        await a.aclose()


async def test_beyond_the_tolerated_offset_the_local_breaker_still_protects(
    stores: tuple[Store, Store],
) -> None:
    """Review R67: what a clock offset beyond ``BREAKER_AHEAD_S`` does (the docs say it): a row
    from a host two minutes ahead is adopted, but the next transition of this process is written
    over it (dated by its own clock, not after the far-ahead row) and this process keeps it: its
    breaker, opened by its own failures, is not closed again by the far-ahead row."""
    a = Scheduler(_config(), store=stores[0])
    loop = asyncio.get_running_loop()
    breaker = a.breaker(KEY)
    try:
        now = time.time()
        SharedBreakers(stores[1]).publish(KEY, "closed", now + 120.0)
        await a._sync_breaker(breaker, loop)
        with pytest.raises(ConnectionError):
            await a.submit(ToolCall("t"), _fail)
        while a._background:
            await _background_done(a)
        state, opened_at = _row(stores[1])
        assert state == "open" and opened_at < now + BREAKER_AHEAD_S
        a._breaker_seen.clear()
        await a._sync_breaker(breaker, loop)
        assert breaker.state is BreakerState.OPEN
    finally:
        await a.aclose()
