"""The scheduler's async core: one event loop, no locks, no threads of its own (with a store, the
lease heartbeat is one thread, joined by ``aclose``).

``Scheduler.submit(call, fn)`` runs ``fn`` under the call's limits and returns its result:

1. Reuse: a call with an idempotency key whose result is cached returns it without running; a
   call whose twin (same key) is running waits for the twin's outcome instead of running again.
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

Everything runs on the event loop the scheduler is first used from; it is not thread-safe (use
``SyncScheduler`` from threads: without a store it runs this module's admission code in its
callers' threads, always under its one lock, and never uses the async attempt loop below).
"""

from __future__ import annotations

import asyncio
import bisect
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from agentgate.errors import (
    AgentGateError,
    CircuitOpen,
    DeadlineExceeded,
    InputError,
    Overloaded,
    SchedulingError,
    StoreError,
)
from agentgate.store._base import Store
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
from agentgate.store.leases import Lease, LeaseManager, SharedBreakers, SharedRateLimits
from agentgate.tasks._backoff import full_jitter
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState, CircuitBreaker
from agentgate.tasks._call import Attempt, ToolCall
from agentgate.tasks._classify import DEFAULT_CLASSIFIER, Classifier
from agentgate.tasks._config import PriorityClass, SchedulerConfig, TenantShare, ToolLimits
from agentgate.tasks._fair import Entry, FairQueue
from agentgate.tasks._metrics import SchedulerMetrics
from agentgate.tasks._retry import Failure, RetryRule, rule_for
from agentgate.tasks._token_bucket import TokenBucket

T = TypeVar("T")

#: Longest pause between two tries for a cross-process lease while all slots are held.
_LEASE_POLL_MAX_S = 0.25
_DEAD_LETTERS_KEPT = 1_000
#: How often a scheduler with a store reads a breaker's shared state (per breaker key).
_BREAKER_SYNC_S = 0.25


class Signal(Protocol):
    """How a waiting call learns it was started: an ``asyncio.Future`` for async callers, a
    thread-safe one-shot signal for the sync facade's callers (``_sync.py``)."""

    def done(self) -> bool: ...

    def set_result(self, result: None, /) -> None: ...


class _Waiter:
    __slots__ = ("call", "entry", "future", "granted", "limits", "queued_at")

    future: Signal  # set only when the call has to wait

    def __init__(self, call: ToolCall, limits: ToolLimits, queued_at: float) -> None:
        self.call = call
        self.limits = limits
        self.queued_at = queued_at
        self.granted = False
        self.entry: Entry[_Waiter] | None = None


class _GiveUp(Exception):
    """Internal: the call is given up for ``reason``; ``error`` is what the caller gets."""

    def __init__(self, reason: str, error: BaseException) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


class Scheduler:
    """Schedules tool calls: priority, tenant fairness, limits, deadlines, safe retries, breakers.

    ``store``: when given, dead letters are persisted there, and per-tool concurrency and rate
    limits and breaker states are shared by every process using the store
    (``agentgate.store.leases``). ``dead_letters``: persist dead letters there without sharing
    limits (a single-process deployment on the embedded store). ``rng``: the source of backoff jitter (seed it to reproduce
    delays). ``classifier``: maps exceptions to error classes. ``registry``: the Prometheus
    registry for this scheduler's metrics (default: a new one).
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
    ) -> None:
        self.config = config or SchedulerConfig()
        self._rng = rng or random.Random()
        self._classifier = classifier
        self._queue: FairQueue[_Waiter] = FairQueue()
        self._in_flight = 0
        self._tool_in_flight: dict[str, int] = {}
        self._tenant_in_flight: dict[str, int] = {}
        self._principal_in_flight: dict[tuple[str, str], int] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._breakers: dict[str, CircuitBreaker] = {}
        self._tool_breakers: dict[str, CircuitBreaker] = {}  # tool -> its default breaker
        self._rules: dict[str, RetryRule] = {}
        self._priorities: dict[str | None, PriorityClass] = {}
        self._limits_cache: dict[str, ToolLimits] = {}
        self._shares: dict[str, TenantShare] = {}
        config = self.config
        # Without global, tenant or principal limits, a slot given back can only start a call to its tool.
        self._per_tool_only = (
            config.max_concurrency is None
            and config.principal_concurrency is None
            and config.tenant.concurrency is None
            and all(share.concurrency is None for share in config.tenants.values())
        )
        self._results: OrderedDict[str, Any] = OrderedDict()
        self._twins: dict[str, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()  # tasks inside a call of this scheduler
        self._nested: dict[asyncio.Task[Any], int] = {}  # those inside more than one (a tool that submits)
        self._dead: list[DeadLetter] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._rate_wait = 0.0
        #: Set by ``SyncScheduler``, whose dispatches run in callers' threads: arms the rate timer.
        self._timer_hook: Callable[[float], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: asyncio.Event | None = None
        self._closed = False
        # False only inside SyncScheduler, whose tools run in their callers' threads and cannot be
        # interrupted: their timeout is checked, not enforced (see _sync.py).
        self._preemptive = True
        self._dead_store = DeadLetterStore(store) if store is not None else dead_letters
        self._leases = LeaseManager(store, ttl_s=self.config.lease_ttl_s) if store is not None else None
        self._rates = SharedRateLimits(store) if store is not None else None
        self._shared_breakers = SharedBreakers(store) if store is not None else None
        self._breaker_seen: dict[str, tuple[float, int]] = {}  # key -> (next read, version seen)
        self._opened_wall: dict[str, float] = {}  # key -> wall time this process knows it opened
        self._adopting = False
        self._background: set[asyncio.Task[None]] = set()
        self.metrics = SchedulerMetrics(
            registry,
            queue_depth=lambda: self._queue.tenant_sizes,
            in_flight=self._tool_in_flight,
            breakers=self.breakers,
        )

    # --- public ---------------------------------------------------------------------------------

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry holding this scheduler's metrics."""
        return self.metrics.registry

    def breaker(self, key: str) -> CircuitBreaker:
        """The circuit breaker for ``key`` (``tool:<name>`` or ``backend:<name>``), created closed."""
        found = self._breakers.get(key)
        if found is None:
            found = self._breakers[key] = CircuitBreaker(
                key, self.config.breaker, on_change=self._breaker_changed
            )
        return found

    def _tool_breaker(self, tool: str) -> CircuitBreaker:
        found = self._tool_breakers[tool] = self.breaker("tool:" + tool)
        return found

    def breakers(self) -> list[BreakerSnapshot]:
        """The state of every breaker this scheduler has used."""
        return [b.snapshot() for b in list(self._breakers.values())]

    def dead_letters(self) -> list[DeadLetter]:
        """Dead letters recorded by this scheduler (the newest 1,000), oldest first."""
        return list(self._dead)

    @property
    def queued(self) -> int:
        """Calls waiting to start."""
        return self._queue.size

    @property
    def in_flight(self) -> int:
        """Attempts running."""
        return self._in_flight

    async def aclose(self, *, drain: bool = True, timeout_s: float | None = None) -> None:
        """Stop taking calls, then let submitted calls finish (``drain``) or cancel them.

        Draining waits at most ``timeout_s`` (None: until done) and cancels what is left after
        it. On return no call of this scheduler is running or waiting, its timer is cancelled,
        and its leases are given back.
        """
        self._closed = True
        if self._tasks and drain:
            self._idle = asyncio.Event()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._idle.wait()
            except TimeoutError:
                pass
        current = asyncio.current_task()
        pending = [t for t in self._tasks if t is not current]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._background:
            await asyncio.wait(list(self._background))
        if self._leases is not None:
            await asyncio.to_thread(self._leases.close)

    # --- the call -------------------------------------------------------------------------------

    def submit(self, call: ToolCall, fn: Callable[[Attempt], Awaitable[T]]) -> Coroutine[Any, Any, T]:
        """Run ``fn`` for ``call`` under the call's limits, deadlines and retry policy; return its result.

        Returns a coroutine (``await scheduler.submit(call, fn)``); errors are raised when it is
        awaited. A plain method rather than ``async def``: one coroutine less on the hot path.

        Raises ``Overloaded`` (queue full), ``DeadlineExceeded`` (could not start, or an attempt
        did not finish, before the deadline), ``CircuitOpen`` (breaker open), ``InputError`` (an
        unknown priority class, arguments that are not JSON), ``SchedulingError`` (scheduler
        closed), or the tool's own last exception when the call is given up (``DeadlineExceeded``
        instead when the deadline passed while a retry waited for its turn). Cancelling the
        caller cancels the running attempt and gives its slots back.
        """
        try:
            if self._closed:
                raise SchedulingError("the scheduler is closed")
            limits = self._limits_cache.get(call.tool) or self._limits(call.tool)
            priority = self._priorities.get(call.priority)
            if priority is None:
                priority = self._priorities[call.priority] = self.config.priority_class(call.priority)
            key = call.idempotency_key() if call.run_id and call.call_id else None
        except AgentGateError as exc:
            return _raise(exc)
        if key is not None:
            return self._submit_keyed(call, fn, limits, priority, key)
        return self._run(call, fn, limits, priority, None)

    async def _submit_keyed(
        self,
        call: ToolCall,
        fn: Callable[[Attempt], Awaitable[T]],
        limits: ToolLimits,
        priority: PriorityClass,
        key: str,
    ) -> T:
        """A call with an idempotency key: reuse a completed result, join a running twin, or run."""
        if key in self._results:
            self._results.move_to_end(key)
            self.metrics.event("reused", call.tool, {"agentgate.idempotency_key": key})
            return self._results[key]  # type: ignore[no-any-return]
        twin = self._twins.get(key)
        if twin is not None:
            self.metrics.event(
                "reused", call.tool, {"agentgate.idempotency_key": key, "agentgate.joined": True}
            )
            return await asyncio.shield(twin)
        outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._twins[key] = outcome
        try:
            result = await self._run(call, fn, limits, priority, key)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                outcome.cancel()
            else:
                outcome.set_exception(exc)
                outcome.exception()  # twins that never came must not log "never retrieved"
            raise
        else:
            outcome.set_result(result)
            if self.config.result_cache_size:
                self._results[key] = result
                if len(self._results) > self.config.result_cache_size:
                    self._results.popitem(last=False)
            return result
        finally:
            self._twins.pop(key, None)

    async def _run(
        self,
        call: ToolCall,
        fn: Callable[[Attempt], Awaitable[T]],
        limits: ToolLimits,
        priority: PriorityClass,
        key: str | None,
    ) -> T:
        """The attempts of one call (one function: this is the hot path, see the module docstring)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # awaited inside a task
        if task in self._tasks:
            self._nested[task] = self._nested.get(task, 0) + 1
        else:
            self._tasks.add(task)
        try:
            tool = call.tool
            deadline = None
            if call.deadline is not None or call.grant_expires_at is not None:
                absolute = call.absolute_deadline()
                assert absolute is not None
                deadline = loop.time() + (absolute - time.time())
            if call.breaker_key is None:
                breaker = self._tool_breakers.get(tool) or self._tool_breaker(tool)
            else:
                breaker = self._breakers.get(call.breaker_key) or self.breaker(call.breaker_key)
            # Looked up once per call: the hot path skips building span attributes nobody records.
            context = otel_context.get_current()
            traced = bool(context) and trace.get_current_span(context).is_recording()
            errors: list[AttemptError] = []
            number = 0
            while True:
                number += 1
                try:
                    # 1. admission: start now, or wait in the fair queue (never past the deadline)
                    if self._shared_breakers is not None:
                        await self._sync_breaker(breaker, loop)
                    if not breaker.closed and breaker.refuses():
                        raise _GiveUp(
                            "circuit_open", CircuitOpen(f"the circuit breaker {breaker.key} is open")
                        )
                    try:
                        if self._closed:
                            raise SchedulingError("the scheduler is closed")
                        if deadline is not None and deadline <= loop.time():
                            raise DeadlineExceeded(
                                f"tool {tool}: the call's deadline passed before it could start"
                            )
                        # Someone waiting: this call queues behind them (no method call to find out).
                        waiter = None if self._queue.size else self._start_now(call, limits, loop)
                        if waiter is None:
                            future: asyncio.Future[None] = loop.create_future()
                            waiter = self._enqueue(call, limits, priority, loop, traced, future)
                            if not waiter.granted:
                                try:
                                    if deadline is None:
                                        await future
                                    else:
                                        async with asyncio.timeout_at(deadline):
                                            await future
                                except BaseException as exc:
                                    self._abandon(waiter)
                                    if isinstance(exc, TimeoutError):
                                        raise DeadlineExceeded(
                                            f"tool {tool}: could not start before the call's deadline "
                                            f"(queued {loop.time() - waiter.queued_at:.3f}s)"
                                        ) from exc
                                    raise
                            waited = loop.time() - waiter.queued_at
                            histogram = self.metrics.wait
                            histogram.counts[bisect.bisect_left(histogram.buckets, waited)] += 1
                            histogram.total += waited
                    except SchedulingError as exc:
                        reasons = {DeadlineExceeded: "deadline", Overloaded: "shed"}
                        raise _GiveUp(reasons.get(type(exc), "closed"), exc) from exc
                    # 2. the attempt, under the breaker, the cross-process lease and the attempt deadline
                    lease: Lease | None = None
                    probing = False
                    try:
                        if not breaker.closed and not breaker.allow():
                            raise _GiveUp(
                                "circuit_open", CircuitOpen(f"the circuit breaker {breaker.key} is open")
                            )
                        probing = True
                        if self._leases is not None and limits.concurrency is not None:
                            lease = await self._lease("tool:" + tool, limits.concurrency, loop, deadline)
                        if self._rates is not None and limits.rate is not None:
                            await self._shared_token("tool:" + tool, limits, loop, deadline)
                        attempt_deadline = deadline
                        if limits.timeout_s is not None:
                            own = loop.time() + limits.timeout_s
                            attempt_deadline = own if attempt_deadline is None else min(own, attempt_deadline)
                        unix_deadline = (
                            None
                            if attempt_deadline is None
                            else time.time() + (attempt_deadline - loop.time())
                        )
                        if traced:
                            self.metrics.event("started", tool, {"agentgate.attempt": number})
                        else:
                            events = self.metrics.events
                            counted = ("started", tool)
                            events[counted] = events.get(counted, 0) + 1
                        # tuple.__new__ directly: Attempt's generated __new__ is one more Python call.
                        attempt = tuple.__new__(Attempt, (call, number, key, unix_deadline))
                        probing = False  # from here on the outcome is reported to the breaker below
                        if attempt_deadline is None or not self._preemptive:
                            result = await fn(attempt)
                        else:
                            timeout = asyncio.timeout_at(attempt_deadline)
                            try:
                                async with timeout:
                                    result = await fn(attempt)
                            except TimeoutError as exc:
                                if timeout.expired():
                                    raise DeadlineExceeded(
                                        f"tool {tool}: attempt {number} did not finish before its deadline"
                                    ) from exc
                                raise
                    except asyncio.CancelledError:
                        if not probing:  # a cancelled call says nothing about the tool; free a probe
                            breaker.release()
                        raise
                    except _GiveUp:
                        raise
                    except Exception as exc:
                        # 3. a failed attempt: classify, tell the breaker, ask the retry rule
                        error_class = self._classifier(exc) or "error"
                        errors.append(
                            AttemptError(
                                number, error_class, type(exc).__qualname__, str(exc)[:500], time.time()
                            )
                        )
                        breaker.record_failure(error_class)
                        delay = self._retry_delay(call, limits, key, exc, error_class, number, loop, deadline)
                        self.metrics.event(
                            "retried",
                            tool,
                            {
                                "agentgate.attempt": number,
                                "agentgate.error_class": error_class,
                                "agentgate.delay_s": delay,
                            },
                        )
                    else:
                        if not breaker.healthy:
                            breaker.record_success()
                        return result
                    finally:
                        if probing:
                            breaker.release()
                        # The local slot first: a second cancellation during the lease's release
                        # must not skip it. The release itself runs to the end, shielded.
                        self._finish(waiter)
                        if lease is not None and self._leases is not None:
                            await asyncio.shield(asyncio.to_thread(self._leases.release, lease))
                    # 4. back off with every slot released, then try again
                    await asyncio.sleep(delay)
                except _GiveUp as stop:
                    if errors:
                        await self._dead_letter(call, key, errors, stop.reason)
                    raise stop.error from None
        finally:
            nested = self._nested.get(task) if self._nested else None
            if nested is not None:
                if nested > 1:
                    self._nested[task] = nested - 1
                else:
                    del self._nested[task]
            else:
                self._tasks.discard(task)
                if not self._tasks and self._idle is not None:
                    self._idle.set()

    def _retry_delay(
        self,
        call: ToolCall,
        limits: ToolLimits,
        key: str | None,
        error: Exception,
        error_class: str,
        number: int,
        loop: asyncio.AbstractEventLoop,
        deadline: float | None,
    ) -> float:
        """The backoff before the next attempt; raises ``_GiveUp`` (with the rule's reason) when there is none."""
        rule = self._rules.get(call.tool)
        if rule is None:
            rule = self._rules[call.tool] = rule_for(limits)
        reason = rule.objection(Failure(error, error_class, number, limits, key is not None))
        if reason is None:
            delay = full_jitter(limits.retry, number, self._rng)
            if deadline is None or loop.time() + delay < deadline:
                return delay
            reason = "deadline"
        raise _GiveUp(reason, error) from error

    def _abandon(self, waiter: _Waiter) -> None:
        """A waiting call gives up (deadline, cancellation): out of the queue, or its slot back."""
        if waiter.granted:
            self._finish(waiter)
        elif waiter.entry is not None:
            self._queue.discard(waiter.entry)

    async def _shared_token(
        self, key: str, limits: ToolLimits, loop: asyncio.AbstractEventLoop, deadline: float | None
    ) -> None:
        """Take a token from the rate bucket shared through the store, waiting for one up to the deadline."""
        assert self._rates is not None and limits.rate is not None
        rate = limits.rate
        while True:
            try:
                wait = await asyncio.to_thread(self._rates.try_take, key, rate.per_second, rate.burst)
            except StoreError as exc:
                raise _GiveUp("store_unavailable", exc) from exc
            if wait <= 0:
                return
            if deadline is not None and loop.time() + wait >= deadline:
                raise _GiveUp(
                    "deadline", DeadlineExceeded(f"no {key} rate token across processes before the deadline")
                )
            # Jitter spreads the processes that all wait for the same token.
            await asyncio.sleep(wait * (1.0 + 0.1 * self._rng.random()))

    async def _lease(
        self, key: str, limit: int, loop: asyncio.AbstractEventLoop, deadline: float | None
    ) -> Lease:
        assert self._leases is not None
        pause = 0.005
        while True:
            try:
                lease = await asyncio.to_thread(self._leases.try_acquire, key, limit)
            except StoreError as exc:
                raise _GiveUp("store_unavailable", exc) from exc
            if lease is not None:
                return lease
            if deadline is not None and loop.time() + pause >= deadline:
                raise _GiveUp(
                    "deadline", DeadlineExceeded(f"no {key} slot free across processes before the deadline")
                )
            await asyncio.sleep(self._rng.uniform(0, pause))
            pause = min(pause * 2, _LEASE_POLL_MAX_S)

    # --- admission ------------------------------------------------------------------------------

    def _start_now(
        self, call: ToolCall, limits: ToolLimits, loop: asyncio.AbstractEventLoop
    ) -> _Waiter | None:
        """The fast path, when nothing waits: start ``call`` at once if every limit has room, else None."""
        if not self._has_room(call, limits):
            return None
        waiter = _Waiter(call, limits, loop.time())
        self._start(waiter)
        self.metrics.observe_wait(0.0)
        return waiter

    def _enqueue(
        self,
        call: ToolCall,
        limits: ToolLimits,
        priority: PriorityClass,
        loop: asyncio.AbstractEventLoop,
        traced: bool,
        future: Signal,
    ) -> _Waiter:
        """The slow path: queue ``call`` fairly (``Overloaded`` when full); ``future`` is set when it starts."""
        waiter = _Waiter(call, limits, loop.time())
        waiter.future = future
        config = self.config
        share = self._shares.get(call.tenant)
        if share is None:
            share = self._shares[call.tenant] = config.tenant_share(call.tenant)
        if self._queue.size >= config.max_queued or (
            share.max_queued is not None and self._queue.tenant_sizes.get(call.tenant, 0) >= share.max_queued
        ):
            self.metrics.event("shed", call.tool, {"agentgate.tenant": call.tenant})
            raise Overloaded(
                f"tool {call.tool}: queue full for tenant {call.tenant!r} "
                f"({self._queue.size} waiting, limit {config.max_queued}, tenant limit {share.max_queued})"
            )
        waiter.entry = self._queue.push(
            waiter,
            priority.rank,
            priority.name,
            priority.weight,
            call.tenant,
            share.weight,
            call.principal,
            call.tool,
        )
        if traced:
            self.metrics.event(
                "queued", call.tool, {"agentgate.tenant": call.tenant, "agentgate.priority": priority.name}
            )
        else:
            events = self.metrics.events
            counted = ("queued", call.tool)
            events[counted] = events.get(counted, 0) + 1
        # A tool at its concurrency limit starts nothing now; a rate-limited one needs its timer armed.
        if limits.rate is not None or (
            limits.concurrency is None or self._tool_in_flight.get(call.tool, 0) < limits.concurrency
        ):
            self._dispatch(call.tool)
        return waiter

    def _has_room(self, call: ToolCall, limits: ToolLimits) -> bool:
        """Can ``call`` start now? Takes the rate token when it can (so: call once, then start)."""
        config = self.config
        if config.max_concurrency is not None and self._in_flight >= config.max_concurrency:
            return False
        if limits.concurrency is not None and self._tool_in_flight.get(call.tool, 0) >= limits.concurrency:
            return False
        if not self._per_tool_only and (
            self._tenant_blocked(call.tenant) or self._agent_blocked(call.tenant, call.principal)
        ):
            return False
        return limits.rate is None or self._bucket(call.tool, limits).try_take()

    def _bucket(self, tool: str, limits: ToolLimits) -> TokenBucket:
        bucket = self._buckets.get(tool)
        if bucket is None:
            assert limits.rate is not None
            bucket = self._buckets[tool] = TokenBucket(limits.rate.per_second, limits.rate.burst)
        return bucket

    def _tenant_blocked(self, tenant: str) -> bool:
        limit = self.config.tenant_share(tenant).concurrency
        return limit is not None and self._tenant_in_flight.get(tenant, 0) >= limit

    def _agent_blocked(self, tenant: str, principal: str) -> bool:
        limit = self.config.principal_concurrency
        return limit is not None and self._principal_in_flight.get((tenant, principal), 0) >= limit

    def _tool_open(self, tool: str) -> bool:
        """Can ``tool`` start an attempt now? Notes the earliest rate-token time when it cannot."""
        limits = self._limits_cache.get(tool) or self._limits(tool)
        if limits.concurrency is not None and self._tool_in_flight.get(tool, 0) >= limits.concurrency:
            return False
        if limits.rate is not None:
            wait = self._bucket(tool, limits).wait_s()
            if wait > 0:
                self._rate_wait = min(self._rate_wait, wait)
                return False
        return True

    def _limits(self, tool: str) -> ToolLimits:
        found = self._limits_cache.get(tool)
        if found is None:
            found = self._limits_cache[tool] = self.config.tool_limits(tool)
        return found

    def _start(self, waiter: _Waiter) -> None:
        call = waiter.call
        waiter.granted = True
        self._in_flight += 1
        self._tool_in_flight[call.tool] = self._tool_in_flight.get(call.tool, 0) + 1
        if not self._per_tool_only:  # the tenant and principal counts matter only to their limits
            self._tenant_in_flight[call.tenant] = self._tenant_in_flight.get(call.tenant, 0) + 1
            agent = (call.tenant, call.principal)
            self._principal_in_flight[agent] = self._principal_in_flight.get(agent, 0) + 1

    def _finish(self, waiter: _Waiter) -> None:
        call = waiter.call
        self._in_flight -= 1
        counts = self._tool_in_flight
        left = counts[call.tool] - 1
        if left:
            counts[call.tool] = left
        else:
            del counts[call.tool]
        if not self._per_tool_only:
            _decrement(self._tenant_in_flight, call.tenant)
            _decrement(self._principal_in_flight, (call.tenant, call.principal))
        if self._queue.size:
            self._dispatch(call.tool if self._per_tool_only else None)

    def _dispatch(self, tool: str | None = None) -> None:
        """Start waiting calls, fairest first, while limits have room; arm the rate timer if needed.

        ``tool``: only that tool's room can have changed (a call to it was queued, or it gave a
        slot back while no global, tenant or principal limit is configured), so only its
        waiting calls can start: after every dispatch, no other tool with waiting calls has room.
        """
        max_concurrency = self.config.max_concurrency
        if max_concurrency is not None and self._in_flight >= max_concurrency:
            return
        self._rate_wait = float("inf")
        if tool is not None:
            open_tools = {tool} if tool in self._queue.tool_sizes and self._tool_open(tool) else set()
        else:
            open_tools = {name for name in self._queue.tool_sizes if self._tool_open(name)}
        while open_tools and (max_concurrency is None or self._in_flight < max_concurrency):
            waiter = self._queue.pop(
                open_tools,
                None if self._per_tool_only else self._tenant_blocked,
                None if self._per_tool_only else self._agent_blocked,
            )
            if waiter is None:
                break
            started = waiter.call.tool
            if not waiter.future.done():  # done: its caller was cancelled after it was picked
                if waiter.limits.rate is not None:
                    self._bucket(started, waiter.limits).try_take()
                self._start(waiter)
                waiter.future.set_result(None)
            if started not in self._queue.tool_sizes or not self._tool_open(started):
                open_tools.discard(started)
        if self._queue.size and self._rate_wait != float("inf"):
            assert self._loop is not None
            at = self._loop.time() + self._rate_wait
            if self._timer_hook is not None:  # the sync facade: maybe not on the loop's thread
                self._timer_hook(at)
            elif self._timer is None or at < self._timer_at:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = self._loop.call_at(at, self._on_timer)
                self._timer_at = at

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    # --- visibility -----------------------------------------------------------------------------

    def _breaker_changed(self, key: str, old: BreakerState, new: BreakerState) -> None:
        names = {BreakerState.OPEN: "breaker_opened", BreakerState.HALF_OPEN: "breaker_half_open"}
        self.metrics.event(names.get(new, "breaker_closed"), key, {"agentgate.breaker_from": old.value})
        if self._shared_breakers is None or self._adopting or new is BreakerState.HALF_OPEN:
            return
        opened_at = time.time()
        if new is BreakerState.OPEN:
            self._opened_wall[key] = opened_at
        loop = self._loop
        if loop is not None and not loop.is_closed():
            state = "open" if new is BreakerState.OPEN else "closed"
            # Called under the breaker's lock, maybe from another thread: publish from the loop.
            loop.call_soon_threadsafe(self._publish_breaker, key, state, opened_at)

    def _publish_breaker(self, key: str, state: str, opened_at: float) -> None:
        assert self._shared_breakers is not None and self._loop is not None
        task = self._loop.create_task(
            asyncio.to_thread(self._shared_breakers.publish, key, state, opened_at),
            name=f"agentgate-breaker-{key}",
        )
        self._background.add(task)
        task.add_done_callback(self._published)

    def _published(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The local breaker still works; the other processes learn nothing from this one.
            self.metrics.tally("breaker_not_shared", task.get_name())

    async def _sync_breaker(self, breaker: CircuitBreaker, loop: asyncio.AbstractEventLoop) -> None:
        """Adopt a newer breaker state another process published (read at most every _BREAKER_SYNC_S)."""
        assert self._shared_breakers is not None
        key = breaker.key
        now = loop.time()
        seen = self._breaker_seen.get(key)
        if seen is not None and now < seen[0]:
            return
        version = seen[1] if seen is not None else 0
        self._breaker_seen[key] = (now + _BREAKER_SYNC_S, version)
        try:
            remote = await asyncio.to_thread(self._shared_breakers.read, key)
        except StoreError:
            return  # the local breaker still protects this process
        if remote is None or remote.version <= version:
            return
        self._breaker_seen[key] = (now + _BREAKER_SYNC_S, remote.version)
        self._adopting = True
        try:
            if remote.state == "open":
                known = self._opened_wall.get(key)
                if breaker.state is BreakerState.CLOSED or known is None or remote.opened_at > known:
                    breaker.adopt_open(time.time() - remote.opened_at)
                    self._opened_wall[key] = remote.opened_at
            elif breaker.state is not BreakerState.CLOSED:
                breaker.adopt_closed()
        finally:
            self._adopting = False

    async def _dead_letter(
        self, call: ToolCall, key: str | None, errors: list[AttemptError], reason: str
    ) -> None:
        letter = self._record_dead(call, key, errors, reason)
        if self._dead_store is not None:
            try:
                await asyncio.to_thread(self._dead_store.record, letter)
            except StoreError:
                # The caller gets the tool's error either way; a lost record is counted, not hidden.
                self.metrics.event("dead_letter_not_stored", call.tool, {"agentgate.reason": reason})

    def _record_dead(
        self, call: ToolCall, key: str | None, errors: list[AttemptError], reason: str
    ) -> DeadLetter:
        """Keep the dead letter of a call given up for ``reason`` in memory and count it; return it."""
        letter = DeadLetter(
            id=uuid.uuid4().hex,
            recorded_at=time.time(),
            tool=call.tool,
            tenant=call.tenant,
            principal=call.principal,
            run_id=call.run_id,
            call_id=call.call_id,
            idempotency_key=key,
            arguments_digest=_digest_or_unknown(call),
            authority_chain=call.authority_chain,
            reason=reason,
            errors=tuple(errors),
        )
        self._dead.append(letter)
        del self._dead[:-_DEAD_LETTERS_KEPT]
        self.metrics.event(
            "gave_up", call.tool, {"agentgate.reason": reason, "agentgate.attempts": len(errors)}
        )
        return letter


def _decrement(counts: dict[Any, int], key: Any) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


def _digest_or_unknown(call: ToolCall) -> str:
    try:
        return call.digest()
    except InputError:
        return "unknown: arguments are not JSON values"


async def _raise(error: BaseException) -> Any:
    """A coroutine that raises ``error`` when awaited (``submit`` reports errors at the await)."""
    raise error
