"""The scheduler's async core: one event loop, no locks, no threads of its own (with a store, the
lease heartbeat is one thread, joined by ``aclose``).

``Scheduler.submit(call, fn)`` runs ``fn`` under the call's limits and returns its result:

1. Reuse: a call with an idempotency key whose result is cached returns it without running; a
   call whose twin (same key) is running waits for the twin's outcome instead of running again
   (a twin still waiting for a slot then waits at the joiner's class when that is more urgent,
   and goes back down when that joiner stops waiting).
2. Admission: a call that can start now (nothing waiting, every limit has room) starts at once;
   otherwise it waits in the fair queue (``_fair.py``), or is refused with ``Overloaded`` when the
   queue or its tenant's share of it is full, or with ``DeadlineExceeded`` when its deadline
   passes before it could start. A waiting call is never started after its deadline.
3. Run: the breaker is asked (``CircuitOpen``), the cross-process lease and rate token are taken
   when a store is configured, and ``fn(attempt)`` runs in the caller's task under the attempt deadline (the
   earlier of the call's deadline and ``now + timeout_s``), so cancelling the caller cancels the
   tool.
4. Failure: the error is classified, the breaker told, and the retry rule asked. A retry waits a
   full-jitter backoff with its slots released, and is given up when the wait would end past the
   deadline. A call given up after at least one failed attempt becomes a dead letter.

Everything runs on the event loop the scheduler is used from, one loop at a time (use
``SyncScheduler`` from threads). Its blocking store work (leases, rate tokens, breakers, dead
letters) runs on a thread pool of its own, never the loop's default executor (``_store_work.py``
says why). The admission state (in-flight counts, rate buckets, breakers, the fair
queue) lives in a ``SharedLimits`` (``_limits.py``), used under its lock: a Gate gives one to
its sync scheduler and to the scheduler of every event loop, so a policy's limits hold across
all of them. The attempt loop's steps (deadline, breaker, failure and retry handling, dead
letters) are methods of the scheduler that the sync facade's attempt loop calls too; only the
loop itself is written twice (an ``await`` cannot be shared with a blocking call without slowing
both).

Where each part lives: ``Scheduler`` (here: its making, ``aclose``, ``submit``, the attempt loop
``_run`` with its wait for a turn in the fair queue, and the deadline helpers) inherits one part
per concern: ``_StoreWork`` (``_store_work.py``: the store pool, cross-process leases and rate
tokens, breaker transitions counted, published and adopted) and ``_Failures`` (``_failures.py``: a
failed attempt classified, told to the breaker and put to the retry rule, the backoff, ``_GiveUp``
and the errors of a call given up, dead letters).
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import inspect
import math
import random
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from agentgate._shown import quoted, shown
from agentgate.errors import AgentGateError, DeadlineExceeded, InputError, SchedulingError
from agentgate.store._base import Store
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
from agentgate.store.leases import Lease, LeaseManager, SharedBreakers, SharedRateLimits
from agentgate.tasks._breaker import BreakerSnapshot, CircuitBreaker
from agentgate.tasks._call import Attempt, ToolCall, require_flag, require_tool_call, require_tool_function
from agentgate.tasks._classify import DEFAULT_CLASSIFIER, Classifier
from agentgate.tasks._config import PriorityClass, SchedulerConfig, ToolLimits, _declared
from agentgate.tasks._failures import (
    _circuit_open,
    _Failures,
    _final_error,
    _give_up,
    _GiveUp,
    _named,
    _started_late,
    _twin_late,
    _twin_out_of_time,
    _TwinOutOfTime,
)
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._metrics import SchedulerMetrics
from agentgate.tasks._retry import RetryRule
from agentgate.tasks._store_work import _close_leases, _StoreWork
from agentgate.tasks._waiter import RUNNING, Waiter

T = TypeVar("T")

_NOT_KEPT = object()
"""What the result cache gives for a key it keeps nothing for (``forget_result``): no result is it."""


class Scheduler(_StoreWork, _Failures):
    """Schedules tool calls: priority, tenant fairness, limits, deadlines, safe retries, breakers.

    ``store``: when given, per-tool concurrency and rate limits and breaker states are shared by
    every process using the store (``agentgate.store.leases``), and dead letters are persisted
    there unless ``dead_letters`` is given. ``dead_letters``: persist dead letters there (alone, a
    single-process deployment on the embedded store; with ``store``, apart from the leases).
    ``rng``: the source of backoff
    jitter (seed it to reproduce delays). ``classifier``: maps exceptions to error classes; every
    ``retry_on`` and ``trip_on`` class of ``config`` must be built in or in ``classifier.classes``
    (``InputError`` naming the field otherwise, see ``SchedulerConfig.check_error_classes``).
    ``registry``: the Prometheus registry for this scheduler's metrics (default: a new one).
    ``limits``: the admission state to share with other schedulers (their limits then hold for
    all of them together; its ``config`` is used, and ``config``, if given too, must be that
    same object); without it the scheduler makes its own and closes it in ``aclose``.
    An argument of another kind (``store`` a ``Store``, ``dead_letters`` a ``DeadLetterStore``,
    ``rng`` a ``random.Random``, ``registry`` a ``CollectorRegistry``) raises ``InputError``
    naming it before anything is made.
    """

    def __init__(
        self,
        config: SchedulerConfig | None = None,
        *,
        store: Store | None = None,
        dead_letters: DeadLetterStore | None = None,
        rng: random.Random | None = None,
        classifier: Classifier = DEFAULT_CLASSIFIER,
        registry: CollectorRegistry | None = None,
        limits: SharedLimits | None = None,
    ) -> None:
        # Before anything is made: an argument of the wrong kind, a retry_on or trip_on class the
        # classifier never returns.
        _check_arguments(config, store, dead_letters, rng, classifier, registry, limits)
        (limits.config if limits is not None else config or SchedulerConfig()).check_error_classes(
            classifier.classes
        )
        if limits is None:
            limits = SharedLimits(config)
            self._owns_limits = True
        else:
            if config is not None and config is not limits.config:
                raise InputError("a scheduler given shared limits must use their config (limits.config)")
            self._owns_limits = False
        #: The admission state, maybe shared with other schedulers; used under ``shared.lock``.
        self.shared = limits
        self.config = limits.config
        self._rng = rng if rng is not None else random.Random()
        self._classifier = classifier
        self._rules: dict[str, RetryRule] = {}
        self._priorities: dict[str | None, PriorityClass] = {}
        self._limits_cache = limits.limits_cache
        self._results: OrderedDict[str, Any] = OrderedDict()
        self._twins: dict[str, asyncio.Future[Any]] = {}
        #: Key of a running keyed call -> the most urgent class among it and the calls joined to
        #: it: its attempts queue at that class (``_submit_keyed``).
        self._twin_classes: dict[str, PriorityClass] = {}
        #: Key of a running keyed call that was joined -> the classes of it and of the calls
        #: joined to it still waiting, in the order they came (a joiner that stops waiting takes
        #: its class out).
        self._twin_callers: dict[str, list[PriorityClass]] = {}
        #: Key of a running keyed call -> its latest attempt's waiter that was queued (a joiner
        #: more urgent than its class moves it up while it waits: ``SharedLimits.hasten``).
        self._twin_waiters: dict[str, Waiter] = {}
        #: Key of a running keyed call -> its attempt's work, ended, that its caller's cancellation
        #: waited for (``_to_its_end``), until ``_submit_keyed`` reads it.
        self._ended: dict[str, asyncio.Future[Any]] = {}
        #: Keys of running keyed calls given up at their own deadline (``_GiveUp.at_deadline``),
        #: until ``_submit_keyed`` tells the calls joined to them.
        self._out_of_time: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()  # tasks inside a call of this scheduler
        #: Attempt waiting for or holding slots -> its event loop: given back by ``_reclaim_closed``
        #: once that loop is found closed under it (no task of it runs again). Taken out, under the
        #: limits' lock, by whoever gives its slots back (``_closed_under``); a non-preemptible
        #: attempt leaves once its work begins (that work may run on in a thread: see ``submit``).
        self._holding: dict[Waiter, asyncio.AbstractEventLoop] = {}
        #: Attempt holding a half-open probe -> its breaker, the probe's period and its claim
        #: across processes (None: none yet), for ``_closed_under`` to give back.
        self._probes: dict[Waiter, tuple[CircuitBreaker, int, Lease | None]] = {}
        self._nested: dict[asyncio.Task[Any], int] = {}  # those inside more than one (a tool that submits)
        self._dead: list[DeadLetter] = []
        # The loop it is used on, held weakly: a Gate maps loops to their schedulers in a
        # WeakKeyDictionary, which a strong reference here would keep alive forever (one loop,
        # scheduler and registry leaked per ``asyncio.run``).
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        # Set by a draining ``aclose``, with the loop it waits on: the last call to end wakes it
        # (unless that loop was closed under the drain: the event cannot be set then).
        self._idle: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        # Set by ``aclose``: ends the retries' backoffs. One per event loop (an Event is bound to
        # the loop it first waits in, and a scheduler outlives an ``asyncio.run``).
        self._closing: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._closed = False
        # False only inside SyncScheduler, whose tools run in their callers' threads and cannot be
        # interrupted: their timeout is checked, not enforced (see _sync.py).
        self._preemptive = True
        # The dead-letter store given goes first: with ``store`` too, dead letters may be kept
        # apart from the leases (until review R89 it was dropped without a word for the store's).
        if dead_letters is None and store is not None:
            dead_letters = DeadLetterStore(store)
        self._dead_store = dead_letters
        self._leases = LeaseManager(store, ttl_s=self.config.lease_ttl_s) if store is not None else None
        self._rates = SharedRateLimits(store) if store is not None else None
        self._shared_breakers = SharedBreakers(store) if store is not None else None
        self._breaker_seen: dict[str, float] = {}  # key -> when its row is read next (loop time)
        # key -> its read in flight (``_sync_breaker``): True once read, False if given up unread
        self._breaker_reads: dict[str, asyncio.Future[bool]] = {}
        self._background: set[concurrent.futures.Future[None]] = set()  # ``_background_job``s running
        # The pool the store work runs on (``_store_pool``): made on first use, shut down by ``aclose``.
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_shut = False  # set by ``aclose``: no pool is made after it but for ``_closer``'s work
        # The call that closed its own scheduler (``aclose(drain=False)`` from its tool), while it
        # runs on: its own store work still has the pool, shut down when it ends (``_closer_ended``).
        self._closer: asyncio.Task[Any] | None = None
        self._pool_lock = threading.Lock()
        self.metrics = SchedulerMetrics(
            registry,
            queue_depth=lambda: limits.queue.tenant_sizes,
            in_flight=limits.tool_in_flight,
            breakers=limits.breaker_snapshots,
        )
        if self._leases is not None:
            # A scheduler dropped without ``aclose`` (its loop is gone) still stops its heartbeat
            # thread, and counts the leases the store did not take back (its metrics are kept,
            # not the scheduler).
            finalizer = weakref.finalize(self, _close_leases, self._leases, self.metrics)
            finalizer.atexit = False  # type: ignore[misc]  # a documented attribute the stubs miss
        limits.attach(self)

    # --- public ---------------------------------------------------------------------------------

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry holding this scheduler's metrics."""
        return self.metrics.registry

    def breaker(self, key: str) -> CircuitBreaker:
        """The circuit breaker for ``key`` (``tool:<name>`` or ``backend:<name>``), created closed.

        One per key for every scheduler sharing this one's limits. Raises ``InputError`` for a
        key that is not a string or not valid Unicode (a lone surrogate).
        """
        return self.shared.breaker(key)

    def breakers(self) -> list[BreakerSnapshot]:
        """The state of every breaker used through this scheduler's (maybe shared) limits."""
        return self.shared.breaker_snapshots()

    @property
    def queued(self) -> int:
        """Calls waiting to start (in every scheduler sharing this one's limits)."""
        return self.shared.queue.size

    @property
    def in_flight(self) -> int:
        """Attempts running (in every scheduler sharing this one's limits)."""
        return self.shared.in_flight

    async def aclose(self, *, drain: bool = True, timeout_s: float | None = None) -> None:
        """Stop taking calls, then let submitted calls finish (``drain``) or cancel them.

        Draining waits at most ``timeout_s`` (None or infinity: until done; 0 or less: not at
        all) and cancels what is left after it. On return no call of this scheduler is running or
        waiting, its leases are given back, and the limits it made itself (none given) are closed.
        A call whose event loop was closed under it can never run or be cancelled: it is neither
        waited for nor cancelled, only forgotten (asyncio reports its task as destroyed while
        pending when it is collected). The store work its calls left running (a dead letter's
        write, a lease given back) is waited for to its end, whichever event loop it was started
        from, live or closed: it runs on the scheduler's own pool and counts its own failure. A
        call that closes its own scheduler (its tool awaits ``aclose(drain=False)``) is neither
        waited for nor cancelled: it runs on, and its own store work (its dead letter, its lease or
        probe's claim given back) is done on that pool, shut down once the call has ended. A
        ``timeout_s`` that is not a number, or NaN, raises ``InputError`` before anything stops,
        as does a ``drain`` that is not True or False. Awaited on another event loop than the live one
        calls of this scheduler run on (in another thread), it raises ``SchedulingError`` before
        anything stops: those calls can only be waited for and cancelled from their own loop.
        """
        timeout_s = _drain_timeout(timeout_s)
        require_flag(drain, "aclose's drain")
        self._forget_dead_tasks()
        _refuse_foreign_loops(self._tasks, asyncio.get_running_loop())
        if drain and asyncio.current_task() in self._tasks:
            # Awaited by one of its own calls (a tool's code): the drain would wait for that very
            # call (review R81: for ever, or until ``timeout_s``).
            raise SchedulingError(
                "Scheduler.aclose from a call it is running would wait for that call: close it once "
                "the call has returned (or with drain=False)"
            )
        self._closed = True
        if self._closing is not None and not self._closing[0].is_closed():
            self._closing[1].set()  # a backoff on a loop closed under it never wakes (RuntimeError)
        if self._tasks and drain:
            idle = asyncio.Event()
            self._idle = (asyncio.get_running_loop(), idle)
            try:
                async with asyncio.timeout(timeout_s):
                    await idle.wait()
            except TimeoutError:
                pass
            finally:
                self._idle = None
        current = asyncio.current_task()
        pending = [t for t in self._tasks if t is not current]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        # Its calls have ended: the transitions of the breakers it shares are the other
        # schedulers' to count and publish from now on (each waits for its own in its ``aclose``).
        self.shared.detach(self)
        if self._owns_limits:
            self.shared.close()
        # Its store work of any loop (this one, another one live in another thread, one closed
        # since): each job's end is the pool's to tell, not its loop's (until review R92 waited
        # for on that loop, from this thread; ``_background_job``).
        await self._landed(self._background.copy())
        if self._leases is not None and not self._pool_shut:  # else an earlier aclose gave them back
            await self._blocking(self.release_leases)
        with self._pool_lock:
            self._pool_shut = True
            if current is not None and current in self._tasks:
                # Closed by its own call (drain=False), which runs on: its dead letter, lease and
                # probe's claim still go through the pool, shut down when it ends (until a
                # regression review of R93 ``_store_pool`` raised ``SchedulingError`` into it).
                self._closer, pool = current, None
            else:
                self._closer, pool, self._pool = None, self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)  # idle now, and no later use makes another (``_store_pool``)

    def _forget_dead_tasks(self) -> None:
        """Drop the calls whose event loop was closed under them: nothing can end them any more.

        Such a call never finishes, and cancelling it needs its closed loop (``RuntimeError``):
        draining waited for it forever. Its slots, lease, probe and queue place are given back
        first (``SharedLimits.reclaim_closed``, for the calls of every scheduler sharing the
        limits); what is left is a pending task for the collector, which asyncio reports as
        destroyed while pending, as it does for any task of a loop closed under it.
        """
        with self.shared.lock:
            self.shared.reclaim_closed()
        dead = {task for task in self._tasks if task.get_loop().is_closed()}
        if dead:
            self._tasks -= dead
            for task in dead:
                self._nested.pop(task, None)

    # --- the call -------------------------------------------------------------------------------

    def submit(
        self, call: ToolCall, fn: Callable[[Attempt], Awaitable[T]], *, preemptible: bool = True
    ) -> Coroutine[Any, Any, T]:
        """Run ``fn`` for ``call`` under the call's limits, deadlines and retry policy; return its result.

        ``preemptible=False``: ``fn`` stands for work that no cancellation stops (a sync function
        in a worker thread), so an attempt past its deadline is not cut short and reported as
        failed while its effect happens anyway: it runs to its end and its result is returned, as
        the sync scheduler does. The deadline still bounds waiting for a slot and retries. A
        cancelled caller's attempt keeps its slots, lease and half-open probe until ``fn`` has
        ended, then the cancellation goes on.

        A plain function (one that returns a value, not an awaitable) runs on the loop's thread,
        blocking it, to its end (no deadline cuts it): its value is the attempt's result, as
        under ``Gate.arun``. Blocking work belongs in a thread (``asyncio.to_thread`` with
        ``preemptible=False``, or ``SyncScheduler``). An ``fn`` that returns an async generator
        (an async generator function), which cannot be awaited and whose body never ran, is
        refused with ``InputError``, as ``SyncScheduler`` refuses it: neither a failed attempt
        nor a success (until review R87c it was the call's result).

        Returns a coroutine (``await scheduler.submit(call, fn)``); errors are raised when it is
        awaited. A plain method rather than ``async def``: one coroutine less on the hot path.

        Raises ``Overloaded`` (queue full), ``DeadlineExceeded`` (could not start, or an attempt
        did not finish, before the deadline), ``CircuitOpen`` (breaker open), ``InputError`` (an
        unknown priority class, arguments that are not JSON, a ``call`` that is not a ``ToolCall``, an ``fn`` that is not callable, a ``preemptible`` that is not True or False), ``SchedulingError`` (scheduler
        closed, limits refusing calls, or the running twin this call joined was cancelled), ``TwinDeadlineExceeded`` (the running twin this call joined was given up at its own deadline, before this call's), or the tool's own last exception when the call is given up (``DeadlineExceeded``
        instead when the deadline passed while a retry waited for its turn). Cancelling the
        caller cancels the running attempt and gives its slots back.
        """
        try:
            if type(call) is not ToolCall:  # the checks' calls only where they can find something
                require_tool_call(call)
            if not callable(fn):
                require_tool_function(fn)
            if preemptible is not True and preemptible is not False:
                # Read as a truth value, "false" made work no cancellation stops preemptible: cut
                # at its deadline and reported failed while its effect happened (until review R86).
                require_flag(preemptible, "submit's preemptible")
            if self._closed:
                raise SchedulingError("the scheduler is closed")
            limits = self._limits_cache.get(call.tool) or self.shared.tool_limits(call.tool)
            priority = self._priorities.get(call.priority)
            if priority is None:
                priority = self._priorities[call.priority] = self.config.priority_class(call.priority)
            key = call.idempotency_key() if call.run_id and call.call_id else None
        except AgentGateError as exc:
            return _raise(exc)
        if key is not None:
            return self._submit_keyed(call, fn, limits, priority, key, preemptible)
        return self._run(call, fn, limits, priority, None, preemptible)

    async def _submit_keyed(
        self,
        call: ToolCall,
        fn: Callable[[Attempt], Awaitable[T]],
        limits: ToolLimits,
        priority: PriorityClass,
        key: str,
        preemptible: bool = True,
    ) -> T:
        """A call with an idempotency key: reuse a completed result, join a running twin, or run."""
        if call.reuse_result and key in self._results:
            self._results.move_to_end(key)
            self.metrics.event("reused", call.tool, {"agentgate.joined": False})
            return self._results[key]  # type: ignore[no-any-return]
        twin = self._twins.get(key)
        if twin is not None and twin.get_loop().is_closed():
            # Its event loop was closed under it: it can never end, so its own ``finally`` never
            # drops it, and it is forgotten here (until review R86b every later call with its key,
            # on any loop, was refused as running beside a twin on another loop, for ever).
            self._forget_twin(key)
            twin = None
        if twin is not None:
            if twin.get_loop() is not asyncio.get_running_loop():
                # Its outcome is set on its own loop, and awaiting it here is not thread-safe (until
                # review R86 asyncio's bare RuntimeError, "attached to a different loop").
                raise SchedulingError(
                    f"tool {call.tool}: the running twin of this call (the same idempotency key) runs on "
                    "another event loop; wait for it there, or call again once it has ended"
                )
            self.metrics.event("reused", call.tool, {"agentgate.joined": True})
            # Made at the first join (no joiner changed the class before it: it is the twin's own).
            callers = self._twin_callers.get(key)
            if callers is None:
                callers = self._twin_callers[key] = [self._twin_classes[key]]
            callers.append(priority)
            if priority.rank < self._twin_classes[key].rank:
                # This call waits for the twin: the twin waits for a slot at this call's class.
                self._twin_classes[key] = priority
                waiter = self._twin_waiters.get(key)
                if waiter is not None:
                    with self.shared.lock:
                        self.shared.hasten(waiter, priority)
            try:
                return await self._join(call, twin)
            finally:
                # This call stopped waiting: its class no longer counts (unless the twin was
                # forgotten with its closed loop, and the key is another call's now).
                if not twin.done() and self._twins.get(key) is twin:
                    self._left_twin(key, priority)
        outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._twins[key] = outcome
        self._twin_classes[key] = priority
        try:
            result = await self._run(call, fn, limits, priority, key, preemptible)
        except BaseException as exc:
            if self._twins.get(key) is not outcome:
                # Forgotten with its closed loop (the coroutine closed as it is collected): the
                # bookkeeping under its key is a later call's, and no live call awaits this one.
                raise
            work = self._ended.pop(key, None)
            if work is not None and not work.cancelled() and work.exception() is None:
                # Its caller was cancelled, but its work ran to its end and returned: that is the
                # call's outcome for the calls joined to it and for its key, as if it had waited
                # (dropped, a later call with the key ran the tool again).
                outcome.set_result(work.result())
                self._keep(call, key, work.result())
            elif not isinstance(exc, Exception):
                # The twin's cancellation (or KeyboardInterrupt, SystemExit) is its caller's own: a
                # joiner nobody interrupted gets the sync facade's answer, not a CancelledError it
                # would take for its own, or an interrupt that would stop its event loop.
                interrupted = SchedulingError(
                    f"tool {call.tool}: the running twin of this call was interrupted"
                )
                if work is not None and not work.cancelled():
                    interrupted.__cause__ = work.exception()  # what the work ended with, to read
                outcome.set_exception(interrupted)
                outcome.exception()  # twins that never came must not log "never retrieved"
            elif key in self._out_of_time:
                # Given up at its own deadline: each joiner is told so, or gets its own deadline.
                outcome.set_exception(_TwinOutOfTime(exc))
                outcome.exception()
            else:
                outcome.set_exception(exc)
                outcome.exception()
            raise
        else:
            outcome.set_result(result)
            self._keep(call, key, result)
            return result
        finally:
            if self._twins.get(key) is outcome:
                self._forget_twin(key)

    def _forget_twin(self, key: str) -> None:
        """Drop the running keyed call with ``key`` from every structure keyed by it: it ended, or
        its event loop was closed under it."""
        self._twins.pop(key, None)
        self._twin_classes.pop(key, None)
        self._twin_waiters.pop(key, None)
        if self._twin_callers:
            self._twin_callers.pop(key, None)
        if self._ended:
            self._ended.pop(key, None)
        if self._out_of_time:
            self._out_of_time.discard(key)

    async def _to_its_end(self, work: Awaitable[T], key: str | None) -> T:
        """Await ``work``, which stands for work no cancellation stops (a sync function in a worker
        thread). When the awaiting task is cancelled, first wait until ``work`` has ended, through
        further cancellations, so that the attempt's slot, lease and half-open probe are held while
        the work runs; then let the cancellation go on. The ended work of a call with ``key`` is
        noted for its ``_submit_keyed`` (``_ended``): what it returned is not lost with the
        cancellation. (Noted on the scheduler, not on the CancelledError: a cancellation that
        passes up through an outer call's tool would carry this call's work to that call.)"""
        future = asyncio.ensure_future(work)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await settled(future)
            if key is not None:
                self._ended[key] = future
            raise

    def _keep(self, call: ToolCall, key: str, result: Any) -> None:
        """Keep ``result`` for ``key``, for later calls with the key (``result_cache_size``)."""
        if self.config.result_cache_size and call.reuse_result:
            self._results[key] = result
            if len(self._results) > self.config.result_cache_size:
                self._results.popitem(last=False)

    def forget_result(self, call: ToolCall, result: object) -> None:
        """Drop ``result`` from the result cache when it is what is kept for ``call``'s key
        (compared by identity: a result kept under the key since stays): its caller read it as a
        failure (``Gate.run``'s ``failed``), and a later call with the key runs the tool, as after
        a tool that raised. Until review R91 such a result was handed to every retry. Called on
        the scheduler's event loop. A key with nothing kept is left alone, for a ``result`` of
        ``None`` too: until review R91b ``get``'s default read as that result, and the ``del`` that
        followed raised ``KeyError`` (a call that kept nothing, a joiner after its twin's forget)."""
        if not self._results or (key := call.idempotency_key()) is None:
            return
        if self._results.get(key, _NOT_KEPT) is result:
            del self._results[key]

    async def _join(self, call: ToolCall, twin: asyncio.Future[T]) -> T:
        """The outcome of ``call``'s running ``twin``, waited for at most until ``call``'s own
        deadline. A twin given up at its own deadline (``_TwinOutOfTime``) gives this call
        ``DeadlineExceeded`` only when this call's deadline has passed too: else this call is told
        the deadline was the twin's (``TwinDeadlineExceeded``), not that it ran out. A
        ``DeadlineExceeded`` that was the twin's tool's outcome is this call's outcome too."""
        if call.deadline is None and call.grant_expires_at is None:
            try:
                return await asyncio.shield(twin)
            except _TwinOutOfTime as ended:
                raise _twin_out_of_time(call, ended.error) from ended.error
        # The twin may run longer than this call may wait: this call's deadline bounds the wait.
        loop = asyncio.get_running_loop()
        own = self._deadline(call, loop.time())
        waiting = asyncio.timeout_at(own)
        try:
            async with waiting:
                return await asyncio.shield(twin)
        except TimeoutError as exc:
            if waiting.expired():
                raise _twin_late(call) from exc
            raise
        except _TwinOutOfTime as ended:
            if loop.time() >= own:
                raise _twin_late(call) from ended.error
            raise _twin_out_of_time(call, ended.error) from ended.error

    def _left_twin(self, key: str, priority: PriorityClass) -> None:
        """A call of class ``priority`` joined to the running call with ``key`` stopped waiting
        for it: the running call's attempts queue at the most urgent class among the callers
        still waiting (the first of them that came, among classes of one rank), and its waiting
        attempt moves back to it (``SharedLimits.slow``)."""
        callers = self._twin_callers[key]
        callers.remove(priority)
        urgent = min(callers, key=_rank)
        if urgent != self._twin_classes[key]:
            self._twin_classes[key] = urgent
            waiter = self._twin_waiters.get(key)
            if waiter is not None:
                with self.shared.lock:
                    self.shared.slow(waiter, urgent)

    async def _run(
        self,
        call: ToolCall,
        fn: Callable[[Attempt], Awaitable[T]],
        limits: ToolLimits,
        priority: PriorityClass,
        key: str | None,
        preemptible: bool = True,
    ) -> T:
        """The attempts of one call (one function: this is the hot path, see the module docstring)."""
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop() is not loop:
            # The loop of the latest call: breaker transitions are published from it. Kept as the
            # first loop only, a scheduler serving a later ``asyncio.run`` published nothing (its
            # first loop closed, or collected), and other processes never saw its breakers open.
            self._loop = weakref.ref(loop)
            with self.shared.lock:
                self.shared.note_loop(loop)  # found closed under its calls, their slots go back
        task = asyncio.current_task()
        assert task is not None  # awaited inside a task
        if task in self._tasks:
            self._nested[task] = self._nested.get(task, 0) + 1
        else:
            self._tasks.add(task)
        shared = self.shared
        lock = shared.lock
        try:
            tool = call.tool
            deadline = None
            if call.deadline is not None or call.grant_expires_at is not None:
                deadline = self._deadline(call, loop.time())
            breaker = shared.breaker_for(call)
            # Looked up once per call: the hot path skips building span attributes nobody records.
            context = otel_context.get_current()
            traced = bool(context) and trace.get_current_span(context).is_recording()
            errors: list[AttemptError] | None = None  # made at the first failure (most calls have none)
            failed: Exception | None = None  # the last failed attempt's error
            number = 0
            cut = False  # an attempt was cut by the call's own deadline (the call then gives up)
            while True:
                number += 1
                try:
                    # 1. admission: start now, or wait in the fair queue (never past the deadline)
                    if self._shared_breakers is not None:
                        await self._sync_breaker(breaker, loop)
                    if not breaker.closed and (refused := breaker.refusal()) is not None:
                        raise _circuit_open(breaker, tool, refused)
                    try:
                        if self._closed:
                            raise SchedulingError("the scheduler is closed")
                        if deadline is not None and deadline <= loop.time():
                            raise DeadlineExceeded(
                                f"tool {tool}: the call's deadline passed before it could start", tool=tool
                            )
                        parent = RUNNING.get()  # the attempt whose tool made this call, if any
                        with lock:
                            if parent is None:
                                # Calls waiting (in any scheduler): this one queues behind them.
                                waiter = None if shared.queue.size else shared.start_now(call, limits)
                            else:
                                waiter = None
                                if self._leases is not None and limits.concurrency:
                                    # Under its ancestor's tool slot and lease when it has one to lend.
                                    waiter = shared.start_nested(call, limits, parent, prefer_tool=True)
                                if waiter is None:
                                    waiter = shared.start_now(call, limits, parent)
                            if waiter is None:
                                future: asyncio.Future[None] = loop.create_future()
                                if key is not None:  # at the class of the most urgent call joined to it
                                    priority = self._twin_classes.get(key, priority)
                                waiter = shared.enqueue(
                                    call, limits, priority, traced, future, self.metrics, loop, parent
                                )
                                if key is not None:
                                    self._twin_waiters[key] = waiter
                            elif key is not None:
                                # Started at once: found by a joiner all the same, whose class the
                                # nested calls its tool makes inherit (review R68).
                                waiter.urgency = self._twin_classes.get(key)
                                self._twin_waiters[key] = waiter
                            self._holding[waiter] = loop
                        if not waiter.queued:
                            self.metrics.observe_wait(0.0)
                        else:
                            if not waiter.granted:
                                if deadline is None:
                                    # Awaited here, not in ``_await_turn``: one coroutine less alive
                                    # per waiting call (for the garbage collector to count and walk).
                                    try:
                                        await future
                                    except BaseException as exc:
                                        self._left_queue(waiter, exc, tool)
                                        raise
                                else:
                                    await self._await_turn(waiter, future, deadline, tool)
                            waited = time.monotonic() - waiter.queued_at
                            histogram = self.metrics.wait
                            histogram.counts[bisect.bisect_left(histogram.buckets, waited)] += 1
                            histogram.total += waited
                    except SchedulingError as exc:
                        raise _give_up(exc) from exc
                    # 2. the attempt, under the breaker, the cross-process lease and the attempt deadline
                    lease: Lease | None = None
                    claim: Lease | None = None  # a half-open probe's claim across processes
                    # held: the period of a half-open probe (0: none); probing: held, fn not started
                    held = probing = 0
                    attempted = False  # whether the attempt began: else its rate token goes back
                    expired = False  # the attempt was cut at its deadline (else it may have overrun it)
                    cancelling = task.cancelling()  # raised when the attempt fails: its caller was cancelled
                    try:
                        if not breaker.closed:
                            admitted = self.shared.admission(breaker)
                            if isinstance(admitted, BreakerSnapshot):
                                raise _circuit_open(breaker, tool, admitted)
                            held = probing = admitted
                            if held:
                                self._probes[waiter] = (breaker, held, None)
                                if self._leases is not None:
                                    claim = await self._probe_claim(breaker, tool)
                                    self._probes[waiter] = (breaker, held, claim)
                        # Running under an ancestor's tool slot: under its lease too (it waits for this
                        # call; should it finish first, the slot and its lease pass to this call,
                        # which may have happened already, before this call resumed).
                        if self._leases is not None and limits.concurrency is not None:
                            with lock:
                                covered = waiter.lease is not None or bool(
                                    waiter.borrowed and "tool" in waiter.borrowed
                                )
                            if not covered:
                                lease = await self._lease("tool:" + tool, limits.concurrency, loop, deadline)
                                with lock:
                                    waiter.lease = (self._leases, lease)
                        if self._rates is not None and limits.rate is not None:
                            await self._shared_token("tool:" + tool, limits, loop, deadline)
                        attempt_deadline = unix_deadline = None
                        if deadline is not None or limits.timeout_s is not None:
                            now = loop.time()
                            if deadline is not None and deadline <= now:
                                raise _started_late(tool, waiter)  # its token goes back below
                            attempt_deadline, unix_deadline = _attempt_deadline(limits, deadline, now)
                        if traced:
                            self.metrics.event("started", tool, {"agentgate.attempt": number})
                        else:
                            events = self.metrics.events
                            counted = ("started", tool)
                            count = events.get(counted)
                            if count is None:  # a new name: past MAX_LABEL_VALUES, counted as OTHER
                                counted, count = self.metrics._admit("started", tool)
                            events[counted] = count + 1
                        # tuple.__new__ directly: Attempt's generated __new__ is one more Python call.
                        attempt = tuple.__new__(Attempt, (call, number, key, unix_deadline))
                        attempted = True
                        probing = 0  # from here on the outcome is reported to the breaker below
                        # Calls the tool makes are nested in this one. Restored below by setting the
                        # value read at admission (``parent``: nothing else sets it in this task
                        # meanwhile) rather than by ``reset(token)``: the Token would be one more
                        # GC-tracked object alive per running attempt, and with 160 attempts in
                        # flight (benchmarks/tasks.py) that extra object per attempt tipped the young
                        # generation over its threshold about once per loop turn: 401/36/3 -> 290/26/2
                        # collections per 20,000-call run (640 in flight: 405/36/3 -> 375/34/3).
                        # Set inside the ``try``: an interrupt as ``set`` returns leaves no mark
                        # (review R70, as in the sync facade).
                        try:
                            RUNNING.set(waiter)
                            work = fn(attempt)
                            if type(work) is not CoroutineType:
                                work = _awaitable(work)  # a plain function: it has run
                            if not preemptible:  # no cancellation stops it: slots held to its end
                                # Nor does a loop closed under it (its thread runs on, unheard):
                                # its slots are never reclaimed from here on (``_reclaim_closed``).
                                self._holding.pop(waiter, None)
                                result = await self._to_its_end(work, key)
                            elif attempt_deadline is None or not self._preemptive:
                                result = await work
                            else:
                                timeout = asyncio.timeout_at(attempt_deadline)
                                try:
                                    async with timeout:
                                        result = await work
                                except Exception as exc:
                                    # Cut by the deadline, whatever the tool made of the cancellation
                                    # (an error of its own on the way out, a transient one too): the
                                    # attempt started and was cut, its effect unknown (until review R61
                                    # classified by the tool's error, and run again).
                                    if timeout.expired():
                                        # The caller's deadline came before the tool's own timeout.
                                        cut = deadline is not None and attempt_deadline >= deadline
                                        expired = True
                                        raise DeadlineExceeded(
                                            f"tool {tool}: attempt {number} did not finish before its "
                                            f"deadline{_raised_on_the_way_out(exc, call)}",
                                            tool=tool,
                                        ) from exc
                                    raise
                        finally:
                            RUNNING.set(parent)
                    except _GiveUp:
                        raise
                    except Exception as exc:
                        # Its probe, if it held one, is told or given back below (``_failed``), not
                        # again by the ``finally``: an error before the tool started (its claim or
                        # its lease not taken) gave it back twice until review R82, and with
                        # another probe running one more was let through than half_open_max_calls.
                        probing = 0
                        if task.cancelling() > cancelling and _from_a_cancellation(exc):
                            # The tool turned its caller's cancellation into an error of its own: the
                            # caller has left, and gets its cancellation (the tool's error as its
                            # cause, as the Gate reads a call failed while cancelled), not a retry.
                            if held:
                                breaker.release(held)
                            raise asyncio.CancelledError(*_cancellation_args(exc)) from exc
                        # 3. a failed attempt: classify, tell the breaker, ask the retry rule
                        if errors is None:
                            errors = []
                        failed = exc
                        ended = loop.time()
                        # Cut at its deadline, or past its timeout_s and not cut there (run to its
                        # end: not preemptible, a plain function): a transport failure is a timeout
                        # (``_failed``). ``now``: its start.
                        overran = expired
                        if attempted and not expired and limits.timeout_s is not None:
                            overran = ended - now >= limits.timeout_s
                        delay = self._failed(
                            call,
                            limits,
                            key,
                            exc,
                            number,
                            errors,
                            breaker,
                            deadline,
                            ended,
                            held,
                            cut,
                            overran,
                        )
                    except BaseException:
                        # Cancelled, or interrupted (KeyboardInterrupt, SystemExit): says nothing
                        # about the tool, and its half-open probe goes back (kept, the breaker
                        # stayed half open with every probe taken and refused every call for good).
                        if held and not probing and not loop.is_closed():  # else ``_closed_under``'s
                            breaker.release(held)
                        raise
                    else:
                        if result is _NOT_BEGUN:  # an async generator function: none of its body ran
                            if held:
                                breaker.release(held)  # says nothing of the tool
                            raise _async_generator_result(tool)
                        if not breaker.healthy:
                            breaker.record_success(period=held)
                        return result
                    finally:
                        if loop.is_closed():
                            # Closed under it: its coroutine is closed as it is collected, and
                            # nothing of the loop can be awaited. Its slots, lease and probe go
                            # back now, unless ``_reclaim_closed`` gave them back already;
                            # never waiting for the lock (``_give_back_closed``).
                            self._give_back_closed(waiter)
                        else:
                            if probing:
                                breaker.release(held)
                            giving_back = None if claim is None else self._end_probe(claim, breaker)
                            # The local slot first: a second cancellation during the lease's release
                            # must not skip it. The release itself runs to the end, shielded.
                            with lock:
                                # Refused before its attempt (its breaker open, its probe claimed
                                # elsewhere, its deadline passed, cancelled): its rate token was
                                # never used (until review R81 only a passed deadline gave it back).
                                if not attempted:
                                    shared.unused(waiter)
                                shared.finish(waiter)  # starts the fairest waiting call, of any scheduler
                                # Its own lease, or one passed on with a lender's slot; None once this
                                # attempt's lease passed on to a nested call still running.
                                held_lease, waiter.lease = waiter.lease, None
                                self._holding.pop(waiter, None)
                                if self._probes:
                                    self._probes.pop(waiter, None)
                            if held_lease is not None:
                                await self._release_lease(*held_lease)
                            # Its caller is told (its result, its error, its pause) once the probe's
                            # claim is back, unless it was cancelled: a probe that ended without
                            # telling the breaker (an interrupt in its classifier or ``pauses``, a
                            # pause) leaves it half open, and until review R90c a call made right
                            # after could find the claim still held and be refused with
                            # ``CircuitOpen`` ("its probe(s) run") though no probe ran. A failed
                            # give-back is counted by ``_end_probe``; the claim then expires.
                            if giving_back is not None and task.cancelling() <= cancelling:
                                await self._landed((giving_back,))
                    # 4. back off with every slot released (``aclose`` cuts it short), then try again
                    await self._back_off(delay)
                except _GiveUp as stop:
                    given_up = stop
                    break
            if errors:
                await self._dead_letter(call, key, errors, given_up.reason)
            if given_up.at_deadline and key is not None:
                self._out_of_time.add(key)  # for its _submit_keyed: told to the joiners
            # Raised here, out of the handler: raised in it, the error's context became the internal
            # _GiveUp, and ``from None`` erased the cause (until review R62).
            raise _final_error(given_up.error, failed, errors)
        finally:
            nested = self._nested.get(task) if self._nested else None
            if nested is not None:
                if nested > 1:
                    self._nested[task] = nested - 1
                else:
                    del self._nested[task]
            else:
                self._tasks.discard(task)
                if task is self._closer:
                    self._closer_ended()
                if not self._tasks and self._idle is not None and not self._idle[0].is_closed():
                    # A call collected after its loop was closed under a drain ends here too
                    # (review R74: setting the event raised "Event loop is closed" at collection).
                    self._idle[1].set()

    async def _await_turn(
        self, waiter: Waiter, future: asyncio.Future[None], deadline: float, tool: str
    ) -> None:
        """Wait in the fair queue until ``waiter`` is granted a start, at most until ``deadline``
        (loop time; a call without one awaits ``future`` in ``_run`` itself). Leaving the queue
        any other way (the deadline, a cancellation) is ``_left_queue``'s."""
        try:
            async with asyncio.timeout_at(deadline):
                await future
        except BaseException as exc:
            self._left_queue(waiter, exc, tool)
            raise

    def _left_queue(self, waiter: Waiter, exc: BaseException, tool: str) -> None:
        """``waiter`` stopped waiting for its turn with ``exc`` (its deadline's ``TimeoutError``, a
        cancellation): it abandons its place and gives back a lease it inherited meanwhile. The
        deadline raises ``DeadlineExceeded`` (from ``exc``); otherwise the caller re-raises ``exc``.
        Its loop closed under it (its coroutine closed as it is collected): ``_closed_under``'s."""
        assert waiter.loop is not None  # queued by ``_run`` on its loop
        if waiter.loop.is_closed():  # not closed meanwhile: its coroutine runs on it now
            self._give_back_closed(waiter)
            return
        with self.shared.lock:
            # Read before the call leaves: the limit it waited for, named in its error.
            holding = self.shared.holding_back(waiter) if isinstance(exc, TimeoutError) else ""
            self.shared.abandon(waiter)
            self._holding.pop(waiter, None)
            # Granted at the last moment under a lender's slot, which
            # ended since: the slot's lease passed to this call.
            inherited, waiter.lease = waiter.lease, None
        if inherited is not None:
            self._give_back(*inherited)
        if isinstance(exc, TimeoutError):
            waited = time.monotonic() - waiter.queued_at
            raise DeadlineExceeded(
                f"tool {tool}: could not start before the call's deadline (queued {waited:.3f}s "
                f"waiting for {holding})",
                tool=tool,
                waited_s=waited,
            ) from exc

    def _reclaim_closed(self) -> None:
        """Give back the slots, leases and half-open probes of this scheduler's attempts whose
        event loop is closed (lock held): no task of such a loop runs again (``loop.close()``
        cancels nothing), so until review R95 such an attempt kept its slot for good, and every
        later call of its tool waited. Called through ``SharedLimits.reclaim_closed`` (which says
        when it is asked) only. A non-preemptible attempt whose work began is not
        among them: that work (a sync function in a worker thread) may run on after its loop
        closed, and its end can no longer be heard, so its slots stay taken."""
        for waiter, loop in list(self._holding.items()):
            if loop.is_closed():
                self._closed_under(waiter)

    def _give_back_closed(self, waiter: Waiter) -> None:
        """``_closed_under(waiter)`` from its own coroutine, closed as it is collected (lock not
        held), without ever waiting for the lock: the collector runs on whichever thread allocates,
        and that thread may hold the lock (a ``threading.Lock``, not reentrant), so until review
        R96 waiting for it there hung every caller of these limits for good. When the lock is
        taken, the call is left to its next holder instead (``SharedLimits.closed_calls``, drained
        by ``reclaim_closed``: before a call queues, and by the poll of ``poll_closed``)."""
        shared = self.shared
        if shared.lock.acquire(blocking=False):
            try:
                self._closed_under(waiter)
            finally:
                shared.lock.release()
        else:
            shared.closed_calls.append((self, waiter))  # atomic: no lock needed

    def _closed_under(self, waiter: Waiter) -> None:
        """``waiter``'s event loop was closed under it: give back what it holds, once (lock held).

        Called by ``_reclaim_closed`` and by the attempt itself when its coroutine is closed as it
        is collected (whichever comes first: the other finds it gone from ``_holding``). A waiting
        call leaves the queue; a granted one gives its slots back (its rate token stays spent: its
        attempt may have begun), its half-open probe goes back to the breaker as a call that says
        nothing of the tool, and its lease and probe's claim across processes are given back on
        the store pool (after ``aclose`` shut it down: they expire within ``lease_ttl_s``)."""
        if self._holding.pop(waiter, None) is None:
            return  # given back already, or kept (a non-preemptible attempt's work began)
        shared = self.shared
        if waiter.granted:
            shared.finish(waiter)
        else:
            shared.abandon(waiter)
        probe = self._probes.pop(waiter, None) if self._probes else None
        lease, waiter.lease = waiter.lease, None
        if probe is not None:
            breaker, period, claim = probe
            breaker.release(period)
            if claim is not None:
                with contextlib.suppress(SchedulingError):  # the store pool is shut: it expires
                    self._end_probe(claim, breaker)
        if lease is not None:
            with contextlib.suppress(SchedulingError):
                self._give_back(*lease)

    # --- the steps of an attempt loop, shared with the sync facade's (``_sync.py``) --------------

    @staticmethod
    def _deadline(call: ToolCall, now: float) -> float:
        """The call's deadline on the monotonic clock whose time is ``now`` (the call has one)."""
        absolute = call.absolute_deadline()
        assert absolute is not None
        return now + (absolute - time.time())


def _check_arguments(
    config: object,
    store: object,
    dead_letters: object,
    rng: object,
    classifier: object,
    registry: object,
    limits: object,
) -> None:
    """Raise ``InputError`` naming the first of ``Scheduler``'s arguments (``SyncScheduler``'s, which
    it is given) that is not of its kind. Until review R84 only ``config``, ``classifier`` and
    ``limits`` were checked: ``store="path.db"`` or ``registry=1`` failed in the making with an
    ``AttributeError`` or ``TypeError``, and ``rng=42`` or ``dead_letters=`` a ``Store`` at the
    first retry or dead letter, whose ``AttributeError`` replaced the tool's error."""
    if not isinstance(classifier, Classifier):
        raise InputError(
            f"classifier must be a Classifier (wrap a function in from_function), got {quoted(classifier)}"
        )
    # A subclass's ``classes`` (``None``, say) failed in ``check_error_classes`` with a bare TypeError.
    _declared(classifier.classes, f"classifier {type(classifier).__name__}.classes")
    # Each but the classifier may be left out (None): the argument, its kind, and what a refusal says.
    kinds: tuple[tuple[object, type[object], str], ...] = (
        (config, SchedulerConfig, "a scheduler needs a SchedulerConfig"),
        (limits, SharedLimits, "a scheduler's limits must be a SharedLimits"),
        (store, Store, "a scheduler's store must be a Store (agentgate.store.open_store)"),
        (
            dead_letters,
            DeadLetterStore,
            "a scheduler's dead_letters must be a DeadLetterStore (DeadLetterStore(store))",
        ),
        (rng, random.Random, "a scheduler's rng must be a random.Random"),
        (registry, CollectorRegistry, "a scheduler's registry must be a prometheus_client CollectorRegistry"),
    )
    for value, kind, needs in kinds:
        if value is not None and not isinstance(value, kind):
            raise InputError(f"{needs}, got {type(value).__name__}")


def _refuse_foreign_loops(tasks: set[asyncio.Task[Any]], loop: asyncio.AbstractEventLoop) -> None:
    """``SchedulingError`` when a call of ``tasks`` runs on a live event loop other than ``loop``
    (the one ``aclose`` runs on): cancelling its task or waiting for it from this loop's thread
    is not thread-safe (asyncio's ``RuntimeError``, or a drain that never ends)."""
    foreign = {task.get_loop() for task in tasks} - {loop}
    if foreign:
        raise SchedulingError(
            f"aclose must run on the event loop its calls run on: {len(foreign)} other event loop(s) "
            "still run calls of this scheduler (close it there, or from a Gate or SyncScheduler)"
        )


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and what it was raised from or while handling, theirs too, each once (a chain
    may loop), at most 100: ``raise X from Y`` in a handler has a cause and a context to follow."""
    chain = [error]
    for link in chain:
        for linked in (link.__cause__, link.__context__):
            if linked is not None and len(chain) < 100 and all(linked is not seen for seen in chain):
                chain.append(linked)
    return chain


def _from_a_cancellation(error: Exception) -> bool:
    """Whether ``error`` was raised while a ``CancelledError`` was handled (or from one): what a
    tool that turns a cancellation into an error of its own raises, ``from None`` included (that
    hides the context from tracebacks but keeps it). With the task's ``cancelling()`` count raised
    during the attempt, this tells a caller's cancellation apart from the count a ``TaskGroup``
    inside the tool leaves raised on Python 3.11 and 3.12 when one of its children fails (its
    ``ExceptionGroup`` is raised while no cancellation is handled)."""
    return any(isinstance(link, asyncio.CancelledError) for link in _chain(error))


def _cancellation_args(error: Exception) -> tuple[Any, ...]:
    """The arguments (the message of ``task.cancel(msg)``) of the cancellation ``error`` replaced."""
    for link in _chain(error):
        if isinstance(link, asyncio.CancelledError):
            return link.args
    return ()


def _raised_on_the_way_out(error: Exception, call: ToolCall) -> str:
    """What a ``DeadlineExceeded`` for a cut attempt says of ``error``, what the tool raised as it
    was cut: nothing for the ``TimeoutError`` of a tool that let the cancellation through, else the
    error named (its text where the call keeps it: a call that keeps none keeps none of an
    agentgate error the tool raised either, whose text its code chose; until review R84 it did)."""
    if type(error) is TimeoutError:
        return ""
    return f"; the tool raised {_named(error, call.keep_error_text)} as it was cut"


def _rank(priority: PriorityClass) -> int:
    return priority.rank


def _drain_timeout(timeout_s: object) -> float | None:
    """``timeout_s`` of ``aclose``/``close`` as a bound to wait: None for None, infinity or an
    integer too large for a float (no wait is that long), at least 0; ``InputError`` for
    anything but a number (a bool included) and for NaN."""
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s != timeout_s:
        raise InputError(f"the drain timeout_s must be a number of seconds or None, got {shown(timeout_s)}")
    if timeout_s <= 0:
        return 0.0
    try:
        seconds = float(timeout_s)
    except OverflowError:  # an integer no float holds: longer than any wait
        return None
    return None if seconds == math.inf else seconds


def _awaitable(value: Any) -> Awaitable[Any]:
    """What ``fn(attempt)`` returned, to await: itself when it can be awaited (a future, an
    object with ``__await__``), else a finished awaitable of it. A plain function given where a
    coroutine function belongs has already run when it returns: its value is the attempt's
    result, as under ``Gate.arun`` (awaiting the value would fail after the tool's effect, and
    the call would be reported failed, dead-lettered, perhaps retried: run again). An async
    generator, which cannot be awaited and whose body never ran, is ``_NOT_BEGUN``'s: the attempt
    refuses it once it returns (``_async_generator_result``), not as a failed attempt."""
    if inspect.isawaitable(value):
        return value
    if inspect.isasyncgen(value):
        return _returned(_NOT_BEGUN)
    return _returned(value)


_NOT_BEGUN = object()
"""What an attempt whose ``fn`` returned an async generator (``_awaitable``) returns."""


def _async_generator_result(tool: str) -> InputError:
    return InputError(
        f"tool {tool}: a Scheduler called an async generator function, whose body never ran and "
        "which cannot be awaited; submit a coroutine function"
    )


async def _returned(value: T) -> T:
    return value


async def settled(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, whatever it ends with, through further cancellations of
    the waiting task (the work it stands for runs on regardless and must be accounted for).
    Its outcome is retrieved, so the loop never logs it as never retrieved; reading it is the
    caller's business: an error it ended with is not raised here (until review R59 it was, and
    replaced the cancellation its caller was waiting to go on with: a cancelled call's work that
    failed at its end was told to the breaker, retried and dead-lettered as a failed attempt)."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((future,))
    if not future.cancelled():
        future.exception()


def _attempt_deadline(limits: ToolLimits, deadline: float | None, now: float) -> tuple[float, float]:
    """The attempt's deadline (monotonic, the clock of ``now``) and the same as Unix time.

    The earlier of the call's ``deadline`` and ``now + timeout_s``; one of them is set.
    """
    attempt_deadline = deadline
    if limits.timeout_s is not None:
        own = now + limits.timeout_s
        attempt_deadline = own if attempt_deadline is None else min(own, attempt_deadline)
    assert attempt_deadline is not None
    return attempt_deadline, time.time() + (attempt_deadline - now)


async def _raise(error: BaseException) -> Any:
    """A coroutine that raises ``error`` when awaited (``submit`` reports errors at the await)."""
    raise error
