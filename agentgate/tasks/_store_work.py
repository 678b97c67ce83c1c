"""The scheduler's store work (``_StoreWork``, a part of ``Scheduler``): cross-process leases and
rate tokens, breaker states shared with other processes, and the pool that runs this blocking work
(and persists dead letters), never the loop's default executor: a call holding a slot must never
wait for a worker thread that a caller blocked on that slot holds (``Gate.run`` under
``asyncio.to_thread``), and a lease taken must be given back whatever becomes of the loop that
asked for it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from agentgate._shown import quoted
from agentgate.errors import CircuitOpen, DeadlineExceeded, SchedulingError, StoreError
from agentgate.store._base import Transaction
from agentgate.store.leases import Lease, LeaseManager, SharedBreakers, SharedRateLimits
from agentgate.tasks._breaker import BreakerState, CircuitBreaker
from agentgate.tasks._config import ToolLimits
from agentgate.tasks._failures import _GiveUp
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._metrics import SchedulerMetrics

T = TypeVar("T")

#: Longest pause between two tries for a cross-process lease while all slots are held.
_LEASE_POLL_MAX_S = 0.25
#: How often a scheduler with a store reads a breaker's shared state (per breaker key).
_BREAKER_SYNC_S = 0.25
#: Threads of a scheduler's own pool for its store work (leases, rate tokens, breakers, dead letters).
_STORE_WORKERS = min(32, (os.cpu_count() or 1) + 4)


class _StoreWork:
    """The ``Scheduler``'s blocking store work: its own thread pool (``_blocking``), the
    cross-process lease of an attempt (taken, given back, released by ``release_leases``), the
    rate tokens shared through the store, and breaker transitions: counted, published to the other
    processes, and adopted from them (``_sync_breaker``)."""

    # The scheduler's state this part reads (``Scheduler.__init__`` sets it).
    shared: SharedLimits
    metrics: SchedulerMetrics
    _rng: random.Random
    _loop: weakref.ref[asyncio.AbstractEventLoop] | None
    _leases: LeaseManager | None
    _rates: SharedRateLimits | None
    _shared_breakers: SharedBreakers | None
    _breaker_seen: dict[str, float]
    _breaker_reads: dict[str, asyncio.Future[bool]]
    _background: set[concurrent.futures.Future[None]]
    _pool: concurrent.futures.ThreadPoolExecutor | None
    _pool_shut: bool
    _closer: asyncio.Task[Any] | None
    _pool_lock: threading.Lock

    def _store_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The scheduler's own pool for blocking store work (made on first use, from any thread).

        Not the loop's default executor: its workers may all be held by callers that wait for a
        slot this scheduler's calls hold (``Gate.run`` in ``asyncio.to_thread``), and a call
        holding that slot that needed a worker to take or give back its lease waited for ever.
        Its jobs never wait for a slot, so they always end. Once ``aclose`` has shut it down it
        raises ``SchedulingError``: nothing would shut down a pool made after that, nor wait for
        its jobs (until review R93 a breaker transition published by a closed scheduler made one).
        Not while the call that closed its own scheduler runs on (``_closer``): its store work is
        done on the pool, kept or made anew, that ``_closer_ended`` shuts down when it ends."""
        pool = self._pool
        if pool is None:
            with self._pool_lock:
                pool = self._pool
                if pool is None and self._pool_shut and self._closer is None:
                    raise SchedulingError("the scheduler is closed: its store work has ended")
                if pool is None:
                    pool = self._pool = concurrent.futures.ThreadPoolExecutor(
                        _STORE_WORKERS, thread_name_prefix="agentgate-scheduler-store"
                    )
        return pool

    def _closer_ended(self) -> None:
        """The call that closed its own scheduler has ended: shut its pool down (its jobs still
        queued or running end first, and ``aclose`` waits for them, ``_background``)."""
        with self._pool_lock:
            pool, self._pool, self._closer = self._pool, None, None
        if pool is not None:
            pool.shutdown(wait=False)

    def _submitted(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """``fn(*args)`` on the store pool in the caller's context (as ``asyncio.to_thread``: an
        event it records lands on the call's span), submitted now."""
        context = contextvars.copy_context()
        return self._store_pool().submit(context.run, fn, *args)

    def _blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the store pool (``_submitted``) as a future of the running loop, not a
        task. A job a worker has begun runs to its end; one still queued behind busy workers is
        dropped when the future is cancelled, as it is when the task awaiting it is cancelled (a
        caller gone, ``aclose``, the loop's shutdown). Work that must happen whatever becomes of
        its caller is a ``_background_job`` instead. Until review R91 this said every job ran to
        its end, and a cancelled caller's dead letter was dropped unwritten and uncounted."""
        return asyncio.wrap_future(self._submitted(fn, *args))

    def _background_job(self, fn: Callable[..., None], *args: Any) -> concurrent.futures.Future[None]:
        """``fn(*args)`` on the store pool (``_submitted``), work that must happen whatever becomes
        of the call that asked for it (a dead letter's write, a lease or a probe's claim given
        back, a breaker published; ``fn`` counts its own failure: ``_counting``, ``_store_dead``),
        kept until it ends for ``aclose`` to wait for (``_landed``). Kept as the pool's future,
        bound to no event loop: nothing cancels it, its worker settles it, and ``aclose`` waits
        for it from whichever loop it runs on. Until review R92 it was kept as a future of the
        loop that asked: ``aclose`` on another loop waited on it from the wrong thread, for good
        while that loop ran in another thread, and forgot it once that loop had closed."""
        job = self._submitted(fn, *args)
        self._background.add(job)
        job.add_done_callback(self._background.discard)  # its failure is counted by ``fn``
        return job

    def release_leases(self) -> None:
        """Stop renewing this scheduler's cross-process leases and give them back, from any thread
        (blocking, idempotent), each the store refuses counted (``_close_leases``). For an owner
        that cannot await ``aclose`` on the scheduler's loop (which runs this too): a ``Gate``
        closing while that loop runs in another thread, or runs no more."""
        if self._leases is not None:
            _close_leases(self._leases, self.metrics)

    async def _release_lease(self, manager: LeaseManager, lease: Lease) -> None:
        """Release an attempt's cross-process lease, to the end even if the call is cancelled
        (``aclose`` waits for it then: until review R92 it did not). A failure is counted by the
        job (``_counting``), also for a call cancelled meanwhile."""
        releasing = self._background_job(
            self._counting, "lease_not_released", lease.key, manager.release, lease
        )
        with contextlib.suppress(StoreError):
            # The attempt has ended: its result, or its error, stands. Raised here, the store's
            # error replaced them, and a tool that ran and succeeded was recorded as failed (its
            # caller told so too). Not given back, the lease is not renewed either (``release``
            # forgot it first): it expires within lease_ttl_s, as ``_give_back``'s.
            await asyncio.shield(self._followed(releasing))

    async def _shared_token(
        self, key: str, limits: ToolLimits, loop: asyncio.AbstractEventLoop, deadline: float | None
    ) -> None:
        """Take a token from the rate bucket shared through the store, waiting for one up to the deadline."""
        assert self._rates is not None and limits.rate is not None
        rate = limits.rate
        while True:
            try:
                wait = await self._blocking(self._rates.try_take, key, rate.per_second, rate.burst)
            except StoreError as exc:
                raise _GiveUp("store_unavailable", exc) from exc
            if wait <= 0:
                return
            if deadline is not None and loop.time() + wait >= deadline:
                raise _GiveUp(
                    "deadline",
                    DeadlineExceeded(
                        f"no {key} rate token across processes before the deadline",
                        tool=key.removeprefix("tool:"),
                    ),
                    at_deadline=True,
                )
            # Jitter spreads the processes that all wait for the same token, but never past the
            # deadline: a token due before it is taken before it (until review R61 the jitter
            # could wake the call after its deadline, and the token it then took was spent).
            pause = wait * (1.0 + 0.1 * self._rng.random())
            if deadline is not None:
                pause = min(pause, wait + (deadline - loop.time() - wait) / 2)
            await asyncio.sleep(pause)

    async def _lease(
        self, key: str, limit: int, loop: asyncio.AbstractEventLoop, deadline: float | None
    ) -> Lease:
        assert self._leases is not None
        pause = 0.005
        while True:
            # The lease is taken in a worker thread, which runs to its end even when this call is
            # cancelled meanwhile: a lease it takes then is given back, never left held (and
            # renewed by the heartbeat) with nobody to release it. The worker gives it back
            # itself when the call was given up first: the loop that asked may be gone by then
            # (``asyncio.run`` cancels what is left, then closes its loop), and nothing of it runs.
            lease = await self._take_once(_Taking(self._leases, key, limit, counting=self._counting))
            if lease is not None:
                return lease
            if deadline is not None and loop.time() + pause >= deadline:
                raise _GiveUp(
                    "deadline",
                    DeadlineExceeded(
                        f"no {key} slot free across processes before the deadline",
                        tool=key.removeprefix("tool:"),
                    ),
                    at_deadline=True,
                )
            await asyncio.sleep(self._rng.uniform(0, pause))
            pause = min(pause * 2, _LEASE_POLL_MAX_S)

    async def _take_once(self, taking: _Taking) -> Lease | None:
        """One try of ``taking`` in a worker thread (``None``: no slot free). The store
        unreachable: ``store_unavailable``. Cancelled meanwhile: a slot taken before the
        cancellation is given back from here, one taken after by the worker (``_Taking``)."""
        assert self._leases is not None
        asking = self._blocking(taking.take)
        try:
            return await asyncio.shield(asking)
        except StoreError as exc:
            raise _GiveUp("store_unavailable", exc) from exc
        except asyncio.CancelledError:
            asking.add_done_callback(_retrieved)
            taken = taking.abandon()
            if taken is not None:  # taken before the cancellation: given back from here
                self._give_back(self._leases, taken)
            raise

    async def _probe_claim(self, breaker: CircuitBreaker, tool: str) -> Lease:
        """The claim of a half-open probe of ``breaker`` across every process of the store: one of
        ``half_open_max_calls`` lease slots (key ``probe:<breaker key>``), taken only while the
        store does not say the breaker opened again (``SharedBreakers.probe_guard``, read in the
        same transaction). None free: ``CircuitOpen`` (the call fails fast, as while OPEN); the
        store unreachable: ``store_unavailable``. A claim taken after the call was cancelled is
        given back; one whose holder dies expires within ``lease_ttl_s``."""
        assert self._leases is not None
        key = breaker.key
        guard = SharedBreakers.probe_guard(key, breaker.policy.reset_timeout_s)
        claim = await self._take_once(
            _Taking(
                self._leases,
                SharedBreakers.probe_key(key),
                breaker.policy.half_open_max_calls,
                guard,
                counting=self._counting,
            )
        )
        if claim is None:
            limit = breaker.policy.half_open_max_calls
            raise _GiveUp(
                "circuit_open",
                CircuitOpen(
                    f"the circuit breaker {key} is half open and its {limit} probe(s) run in this or "
                    f"another process sharing the store, or the store says it opened again (tool {quoted(tool)})",
                    key=key,
                    retry_after_s=0.0,
                ),
            )
        return claim

    def _end_probe(self, claim: Lease, breaker: CircuitBreaker) -> concurrent.futures.Future[None]:
        """Give back a probe's claim, submitted now; the give-back is returned for the call to
        wait for (``_landed``) when it is not cancelled (``aclose`` waits for it too). When the
        breaker is OPEN now (the probe failed), the same transaction writes its opening to the
        store first, so no other process probes before the store says open."""
        assert self._leases is not None
        before = None
        if breaker.state is BreakerState.OPEN:
            opened_at = self.shared.opened_wall.get(breaker.key)
            if opened_at is not None:
                before = SharedBreakers.reopen(breaker.key, opened_at)
        release = functools.partial(self._leases.release, claim, before=before)
        return self._background_job(self._counting, "lease_not_released", claim.key, release)

    def _give_back(self, manager: LeaseManager, lease: Lease) -> None:
        """Release ``lease`` (taken by ``manager``) on the store pool, submitted now, without
        waiting for it: for a call that cannot wait (cancelled). ``aclose`` waits for it."""
        # Not given back when it fails: it expires within lease_ttl_s once the heartbeat stops
        # renewing it, which ``LeaseManager.release`` ensures by forgetting it first.
        self._background_job(self._counting, "lease_not_released", lease.key, manager.release, lease)

    def _counting(self, failure: str, key: str, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)`` (a store worker), counting ``failure`` for ``key`` when it raises, whatever
        the error, then raising it. The job counts, not the loop that asked: a loop closed before
        the job ended never learns how it ended, and until review R91c a lease given back or a
        breaker published from such a loop failed uncounted (as did the release of a call
        cancelled while it waited). The job that gives back a lease taken after its call was given
        up (``_Taking``) counts through here too (until review R91d it did not)."""
        try:
            fn(*args)
        except BaseException:
            self.metrics.tally(failure, key)
            raise

    @staticmethod
    def _followed(job: concurrent.futures.Future[T]) -> asyncio.Future[T]:
        """``job`` (a ``_background_job``, of any loop) as a future of the running loop whose
        outcome is read even where nothing awaits it any more (a caller cancelled while it awaited
        it through ``asyncio.shield``, a wait cut short): the job counts its own failure, and
        until a regression review of R92 a cancelled caller's failed dead-letter write or lease
        release was also logged by asyncio as "Future exception was never retrieved"."""
        landing = asyncio.wrap_future(job)
        landing.add_done_callback(_retrieved)
        return landing

    @classmethod
    async def _landed(cls, jobs: Iterable[concurrent.futures.Future[None]]) -> None:
        """Wait until each of ``jobs`` (``_background_job``s, of any loop) has ended, from the
        running loop; a failure is not raised (each job counts its own)."""
        waiting = [cls._followed(job) for job in jobs]
        if waiting:
            await asyncio.wait(waiting)

    # --- breaker transitions: counted, published to the other processes, adopted from them ------

    def _breaker_event(self, key: str, old: BreakerState, new: BreakerState, on_span: bool) -> None:
        """Count a transition of a (shared) breaker; ``on_span``: also add it to the current span."""
        names = {BreakerState.OPEN: "breaker_opened", BreakerState.HALF_OPEN: "breaker_half_open"}
        if on_span:
            self.metrics.event(names.get(new, "breaker_closed"), key, {"agentgate.breaker_from": old.value})
        else:
            self.metrics.tally(names.get(new, "breaker_closed"), key)

    def _publish_breaker(self, key: str, new: BreakerState, opened_at: float, generation: int) -> bool:
        """Publish this process's transition ``generation`` of ``key`` to the other processes
        from this scheduler's loop; False if it cannot (no store, its loop gone, or closed)."""
        loop = self._loop() if self._loop is not None else None
        if self._shared_breakers is None or self._pool_shut or loop is None or loop.is_closed():
            return False
        state = "open" if new is BreakerState.OPEN else "closed"
        try:
            # Called under the breaker's lock, maybe from another thread: publish from the loop.
            loop.call_soon_threadsafe(self._publish_on_loop, key, state, opened_at, generation)
        except RuntimeError:  # closed between the check and here
            return False
        return True

    def _publish_on_loop(self, key: str, state: str, opened_at: float, generation: int) -> None:
        # One job per key at a time writes its transitions in the order they were made: a job
        # per transition, on a pool of several workers, could write a breaker's close before its
        # open, and the other processes then saw it open until its next transition.
        if self._pool_shut:
            # Closed since ``_publish_breaker`` said yes: the key's next check writes it.
            self.shared.unwritten(key, (state, opened_at, generation))
            return
        if not self.shared.queue_publication(key, state, opened_at, generation):
            return  # the job writing this key now writes this transition next
        try:
            self._background_job(self._counting, "breaker_not_shared", key, self._publish_in_order, key)
        except BaseException:
            # Not written: the key's next check or transition starts a job again.
            while (dropped := self.shared.next_publication(key)) is not None:
                self.shared.unwritten(key, dropped)
            raise

    def _publish_in_order(self, key: str) -> None:
        """Write ``key``'s transitions to the store one by one, each time the latest one queued,
        until none is left (a store worker). When one fails, the local breaker still works and
        the other processes learn nothing from it yet: it is kept (``unwritten``) and written
        again at the next check of the key, and until then no row of the key is adopted, since
        the store's is older than it. The later ones are still written, and the failure is
        raised at the end (counted as ``breaker_not_shared``)."""
        assert self._shared_breakers is not None
        failed: Exception | None = None
        while (latest := self.shared.next_publication(key)) is not None:
            try:
                self._shared_breakers.publish(key, latest[0], latest[1])
            except Exception as exc:
                failed = exc
                self.shared.unwritten(key, latest)
            except BaseException:
                # The worker stops here (a KeyboardInterrupt, a SystemExit): this transition and
                # any queued after it stay unwritten, and the key is released, so that its next
                # transition or check starts a worker again (until review R55 the key stayed
                # marked as being written, and no later transition of it was ever published).
                self.shared.unwritten(key, latest)
                while (dropped := self.shared.next_publication(key)) is not None:
                    self.shared.unwritten(key, dropped)
                raise
            else:
                self.shared.settle(key, latest[2])
        if failed is not None:
            raise failed

    async def _sync_breaker(self, breaker: CircuitBreaker, loop: asyncio.AbstractEventLoop) -> None:
        """Adopt a newer breaker state another process published, before a call's admission: read
        unless a read of the key ended less than _BREAKER_SYNC_S ago (the fast path, no await).

        One read of a key is in flight at a time (``_breaker_reads``, per event loop: a call on
        another loop reads on its own), and every call that arrives during it awaits it, so none is
        admitted on a local state older than that. Until review R95 the key was marked read as
        its read began, and the calls arriving during the read skipped it: admitted on the state of
        the previous read, of any age (a burst after a quiet spell ran on a backend the store said
        was open, or was refused by a half-open breaker the store said was closed). A waiting call
        gets the read's error as its reader does (``_read_breaker_row``); a reader cancelled (or
        interrupted) before its read ended wakes its waiters, and one of them reads for the rest.
        """
        key = breaker.key
        next_read = self._breaker_seen.get(key)
        if next_read is not None and loop.time() < next_read:
            return
        while (reading := self._breaker_reads.get(key)) is not None and reading.get_loop() is loop:
            # Shielded: a waiter cancelled is its own affair, not the read's.
            if await asyncio.shield(reading):
                return
            # Its reader was cancelled before the read ended: this call reads, or awaits the one that does.
        reading = loop.create_future()
        self._breaker_reads[key] = reading
        try:
            await self._read_breaker_row(breaker, loop)
        except Exception as exc:
            reading.set_exception(exc)
            reading.exception()  # not logged as never retrieved when no call waited for it
            raise
        except BaseException:
            reading.set_result(False)  # cancelled or interrupted: a waiter reads again
            raise
        else:
            reading.set_result(True)
        finally:
            if self._breaker_reads.get(key) is reading:
                del self._breaker_reads[key]

    async def _read_breaker_row(self, breaker: CircuitBreaker, loop: asyncio.AbstractEventLoop) -> None:
        """``_sync_breaker``'s read of the key's row, and its adoption; the next one is due
        _BREAKER_SYNC_S after it ended (unless it was cancelled or interrupted). A row that the
        store cannot read (``StoreError``) is no error: the local breaker still protects.

        Never a row that may be older than a transition of this process: none is read while one
        is not written yet, and a row read while one was made is not adopted (read again next
        time). Such a row, a stale "closed" read before this process's "open" was written, closed
        the breaker this process had just opened (and a stale "open" reopened one it closed).
        Nor a row no newer than the latest transition this process knows (``breaker_latest``,
        ordered as the store orders writes: by time, an opening above a closing at the same
        time), unless that one is dated more than ``BREAKER_AHEAD_S`` ahead of this clock. Until
        review R67 a row was adopted when its version was above the last one read, and a store
        restored from a backup (versions back to lower numbers) hid the other processes' new
        transitions until the version passed the old one."""
        assert self._shared_breakers is not None
        key = breaker.key
        own = self.shared.own_transitions(key)
        if own is None:
            # The store does not have this process's latest transition yet: its row is older.
            # One whose write failed is written again now (at most every _BREAKER_SYNC_S).
            self._breaker_seen[key] = loop.time() + _BREAKER_SYNC_S
            failed = self.shared.to_write_again(key)
            if failed is not None:
                self._publish_on_loop(key, *failed)
            return
        try:
            remote = await self._blocking(self._shared_breakers.read, key)
        except StoreError:
            self._breaker_seen[key] = loop.time() + _BREAKER_SYNC_S
            return  # the local breaker still protects this process
        # Read, and adopted below with no await between: only now is the key read. A reader
        # cancelled, even as its read ended (resumed with CancelledError, the row dropped), or
        # any other error leaves it due at once (until R95's regression review a read that had
        # ended counted, and the calls of the next 0.25 s skipped it on the stale local state).
        self._breaker_seen[key] = loop.time() + _BREAKER_SYNC_S
        if remote is None or not self.shared.newer_than_known(
            key, (remote.opened_at, remote.state == "open"), own
        ):
            return  # the row read before, one older (restored from a backup), or read too early
        opened_wall = self.shared.opened_wall
        # Adopted only while this process has made no transition of the key since the read, asked
        # under the breaker's lock: one made on another thread after ``newer_than_known`` was
        # overridden by this older row until the next transition (until review R68).
        shared = self.shared

        def unchanged() -> bool:
            return shared.made_none_since(key, own)

        with shared.adopting():
            if remote.state == "open":
                known = opened_wall.get(key)
                if (
                    breaker.state is BreakerState.CLOSED or known is None or remote.opened_at > known
                ) and breaker.adopt_open(time.time() - remote.opened_at, unchanged=unchanged):
                    opened_wall[key] = remote.opened_at
            elif breaker.state is not BreakerState.CLOSED:
                breaker.adopt_closed(unchanged=unchanged)


class _Taking:
    """One try for a cross-process lease, made in a worker thread (``take``) for a call that may
    be given up meanwhile (``abandon``): whichever comes second gives the lease back. ``counting``
    is the scheduler's ``_StoreWork._counting``, through which ``take`` gives a lease back."""

    __slots__ = ("_abandoned", "_counting", "_guard", "_key", "_limit", "_lock", "_manager", "_taken")

    def __init__(
        self,
        manager: LeaseManager,
        key: str,
        limit: int,
        guard: Callable[[Transaction, float], bool] | None = None,
        *,
        counting: Callable[..., None],
    ) -> None:
        self._manager = manager
        self._counting = counting
        self._key = key
        self._limit = limit
        self._guard = guard
        self._lock = threading.Lock()
        self._abandoned = False
        self._taken: Lease | None = None

    def take(self) -> Lease | None:
        """Try for the lease (worker thread); one taken after ``abandon`` is given back here."""
        lease = self._manager.try_acquire(self._key, self._limit, guard=self._guard)
        with self._lock:
            if not self._abandoned:
                self._taken = lease
                return lease
        if lease is not None:
            # Not given back: counted as lease_not_released, whatever the error, as every other
            # give-back is (until review R91d it was not); a StoreError is not raised on. Not
            # renewed either (``release`` forgot it first), so it expires within the lease's ttl.
            with contextlib.suppress(StoreError):
                self._counting("lease_not_released", lease.key, self._manager.release, lease)
        return None

    def abandon(self) -> Lease | None:
        """The call gave up: the lease ``take`` returned already (for the caller to give back),
        else None, and a lease taken from now on is given back by ``take`` itself."""
        with self._lock:
            self._abandoned = True
            return self._taken


def _close_leases(manager: LeaseManager, metrics: SchedulerMetrics) -> None:
    """Close ``manager`` (blocking, from any thread), counting each lease the store does not take
    back as ``lease_not_released``, once, whatever the error: for ``aclose``, ``release_leases``
    and the finalizer of a scheduler dropped unclosed (which must not hold the scheduler). Until
    review R91d these were skipped uncounted."""
    manager.close(unreleased=lambda lease: metrics.tally("lease_not_released", lease.key))


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Read the outcome of a future nobody awaits any more (no "never retrieved" log)."""
    if not future.cancelled():
        future.exception()
