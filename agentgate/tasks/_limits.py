"""The admission state every scheduler of one Gate shares: one set of limits, one fair queue.

A Gate runs sync calls through a ``SyncScheduler`` and async calls through one ``Scheduler`` per
event loop. The limits a policy declares are the Gate's, not each scheduler's, so all of them
admit through one ``SharedLimits``: the in-flight counts (global, per tool, tenant and
principal), the rate token buckets, the circuit breakers and the fair queue of waiting calls.

Thread safety: every method whose name says it (and every field below) is used with ``lock``
held; the sync facade's callers and every event loop thread take it. Breakers are thread-safe on
their own and are looked up without the lock. A waiting call is told it may start through its
``Signal``: a thread-safe one-shot for a sync caller (``_sync._Wake``), the caller's
``asyncio.Future`` for an async caller, resolved on *its* loop: directly when the dispatch runs on
that loop's thread, else through ``loop.call_soon_threadsafe``. So a slot given back by any
scheduler starts the fairest waiting call of any scheduler, and no waiter sleeps while its slot
is free.

Rate-limited waiting calls are started by one timer thread (made on first use, joined by
``close``) that sleeps until the earliest token and then dispatches under the lock.

Nested calls (a call made while a tool of these limits runs: ``RUNNING`` names the running
attempt's ``Waiter``, in the caller's context) never wait for a slot their own ancestor holds:
the ancestor is waiting for them, so that wait could never end. A nested call blocked on a full
limit (global, tool, tenant, principal) that an ancestor holds a slot of borrows that slot
(``Waiter.borrowed``; the lender's ``lent``) instead of waiting: it runs under its parent's
slot, one borrower per slot at a time, so siblings are still limited. A borrowed slot goes back
to its lender when the borrower finishes; a lender that finishes first hands the slot on to the
borrower, which then holds it as its own, so the counts never fall below what is running.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from agentgate.errors import InputError, Overloaded, SchedulingError
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState, CircuitBreaker
from agentgate.tasks._call import OVERFLOW_BREAKER, ToolCall
from agentgate.tasks._config import PriorityClass, SchedulerConfig, TenantShare, ToolLimits
from agentgate.tasks._fair import Entry, FairQueue
from agentgate.tasks._metrics import SchedulerMetrics
from agentgate.tasks._token_bucket import TokenBucket

if TYPE_CHECKING:
    from agentgate.store.leases import Lease, LeaseManager
    from agentgate.tasks._scheduler import Scheduler

_LONGEST_TIMER_WAIT_S = 86_400.0
_NEVER = float("inf")
PER_NAME_STATE = 4096
"""How many tools (and tenants) the per-name state keeps before it forgets what a new entry would
hold again (caches derived from the config, full token buckets) or shares one entry (breakers:
``OVERFLOW_BREAKER``). Tool and tenant names reach a scheduler used alone from its callers (a
Gate passes only those its policy declares), so without a bound a caller inventing names would
grow them without end."""
#: The limits a slot counts against, in the order they are checked.
_DIMENSIONS = ("global", "tool", "tenant", "principal")


class Signal(Protocol):
    """How a waiting call learns it was started (``set_result`` is called with the lock held)."""

    def done(self) -> bool: ...

    def set_result(self, result: None, /) -> None: ...

    def cancel(self) -> object: ...


def _resolve(future: Signal) -> None:
    if not future.done():
        future.set_result(None)


class Waiter(Entry["Waiter"]):
    """One attempt's claim on slots: granted when started, ``queued`` while waiting.

    It is its own place in the fair queue (an ``Entry`` whose item is itself): a call that waits
    makes one object less (fewer for the garbage collector to walk while thousands wait).
    """

    __slots__ = (
        "borrowed",
        "call",
        "finished",
        "future",
        "granted",
        "lease",
        "lent",
        "limits",
        "loop",
        "owner",
        "parent",
        "queued",
        "queued_at",
        "thread",
    )

    future: Signal  # set only when the call has to wait
    thread: int  # the thread of ``loop``, set with it

    def __init__(self, call: ToolCall, limits: ToolLimits, queued_at: float, owner: SharedLimits) -> None:
        self.call = call
        self.limits = limits
        self.queued_at = queued_at
        self.owner = owner
        self.granted = False
        self.finished = False
        #: Entered in the fair queue (it waited, or waits: ``alive``).
        self.queued = False
        #: The loop whose thread must resolve ``future`` (an asyncio future); None: thread-safe signal.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: The running attempt this call was made from (a nested call), else None.
        self.parent: Waiter | None = None
        #: Limit dimension -> the ancestor whose slot this attempt runs under (None: none borrowed).
        self.borrowed: dict[str, Waiter] | None = None
        #: Limit dimension -> the nested attempt this one's slot is lent to (None: none lent).
        self.lent: dict[str, Waiter] | None = None
        #: The cross-process lease of this attempt's tool slot and the manager it came from (a
        #: scheduler with a store sets it, and gives it back after ``finish``); passed on with the
        #: tool slot to a nested attempt that outlives this one (``_finish_lending``). None: none.
        self.lease: tuple[LeaseManager, Lease] | None = None

    @property  # the entry's item is the waiter itself (a property: no reference cycle)
    def item(self) -> Waiter:  # type: ignore[override]
        """The fair queue's item for this entry: the waiter itself."""
        return self


#: The attempt whose tool is running in this context (set by the schedulers around the tool).
RUNNING: contextvars.ContextVar[Waiter | None] = contextvars.ContextVar(
    "agentgate_running_call", default=None
)


def _dimension_key(call: ToolCall, dimension: str) -> object:
    """Which slot of ``dimension`` a call of ``call`` counts against (two calls share it when equal)."""
    if dimension == "tool":
        return call.tool
    if dimension == "tenant":
        return call.tenant
    if dimension == "principal":
        return (call.tenant, call.principal)
    return None


class SharedLimits:
    """The limits of ``config`` and the fair queue, shared by every scheduler given this object.

    ``Scheduler(limits=...)`` and ``SyncScheduler(limits=...)`` admit through it; a scheduler
    made without one makes its own. ``close()`` stops the rate timer thread (idempotent; the
    Gate calls it, a scheduler calls it on the object it made). ``refuse_waiting`` refuses what
    waits and everything asked later (the Gate calls it first when it closes).
    """

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        if config is not None and not isinstance(config, SchedulerConfig):
            raise InputError(f"scheduler limits need a SchedulerConfig, got {type(config).__name__}")
        self.config = config = config or SchedulerConfig()
        self.lock = threading.Lock()
        self.queue: FairQueue[Waiter] = FairQueue()
        self.in_flight = 0
        self.tool_in_flight: dict[str, int] = {}
        self.tenant_in_flight: dict[str, int] = {}
        self.principal_in_flight: dict[tuple[str, str], int] = {}
        self.buckets: dict[str, TokenBucket] = {}
        self.limits_cache: dict[str, ToolLimits] = {}
        self.shares: dict[str, TenantShare] = {}
        self.breakers: dict[str, CircuitBreaker] = {}
        self.tool_breakers: dict[str, CircuitBreaker] = {}  # tool -> its default breaker
        #: Wall time this process knows each breaker opened (cross-process breaker sharing).
        self.opened_wall: dict[str, float] = {}
        # Without global, tenant or principal limits, a slot given back can only start a call to its tool.
        self.per_tool_only = (
            config.max_concurrency is None
            and config.principal_concurrency is None
            and config.tenant.concurrency is None
            and all(share.concurrency is None for share in config.tenants.values())
        )
        self._rate_wait = _NEVER
        self._timer_at = _NEVER
        self._timer_wake = threading.Condition(self.lock)
        self._timer: threading.Thread | None = None
        self._stopped = False
        self._listeners: weakref.WeakSet[Scheduler] = weakref.WeakSet()
        self._listeners_lock = threading.Lock()
        self._adopting = threading.local()
        #: Breaker key -> its latest transition not yet written to the store (state, opened_at),
        #: and the keys a store worker is writing now: one at a time per key, so in order.
        self._to_publish: dict[str, tuple[str, float]] = {}
        self._publishing: set[str] = set()
        self._publish_lock = threading.Lock()
        #: Set by ``refuse_waiting``: why no call starts any more (None: calls start).
        self.refusing: str | None = None
        #: Queued nested calls: started by ``_start_nested_waiting`` once an ancestor can lend.
        self.nested_waiting: set[Waiter] = set()

    @property
    def queued(self) -> int:
        """Calls waiting to start, in every scheduler sharing these limits."""
        return self.queue.size

    # --- limits ---------------------------------------------------------------------------------

    def tool_limits(self, tool: str) -> ToolLimits:
        """The limits of ``tool`` (cached; safe without the lock)."""
        found = self.limits_cache.get(tool)
        if found is None:
            if len(self.limits_cache) >= PER_NAME_STATE:
                self.limits_cache.clear()  # derived from the config: made again when asked
            found = self.limits_cache[tool] = self.config.tool_limits(tool)
        return found

    def breaker(self, key: str) -> CircuitBreaker:
        """The circuit breaker for ``key``, created closed; one per key for all schedulers (no lock needed)."""
        found = self.breakers.get(key)
        if found is None:
            if len(self.breakers) >= PER_NAME_STATE and key.removeprefix("tool:") not in self.config.tools:
                # Past the bound, keys the config does not name share one breaker, as metrics
                # labels share ``_other``: never dropped, so no call holds a breaker nobody lists.
                key = OVERFLOW_BREAKER
                found = self.breakers.get(key)
                if found is not None:
                    return found
            made = CircuitBreaker(key, self.config.breaker, on_change=self._breaker_changed)
            found = self.breakers.setdefault(key, made)  # atomic: two threads get the same one
        return found

    def breaker_for(self, call: ToolCall) -> CircuitBreaker:
        """The breaker ``call`` runs under: its ``breaker_key``, else its tool's."""
        if call.breaker_key is not None:
            keyed = self.breakers.get(call.breaker_key) or self.breaker(call.breaker_key)
            if keyed.key != call.breaker_key and call.tool in self.config.tools:
                keyed = self.breaker("tool:" + call.tool)  # a named tool never shares the overflow
            return keyed
        found = self.tool_breakers.get(call.tool)
        if found is None:
            found = self.breaker("tool:" + call.tool)
            if found.key != OVERFLOW_BREAKER and len(self.tool_breakers) < PER_NAME_STATE:
                self.tool_breakers[call.tool] = found  # else found again through ``breaker``
        return found

    def breaker_snapshots(self) -> list[BreakerSnapshot]:
        """The state of every breaker used so far."""
        return [b.snapshot() for b in list(self.breakers.values())]

    # --- breaker transitions: told to every scheduler, published to the store once -------------

    def attach(self, scheduler: Scheduler) -> None:
        """Tell ``scheduler`` about breaker transitions from now on (held weakly)."""
        with self._listeners_lock:
            self._listeners.add(scheduler)

    def queue_publication(self, key: str, state: str, opened_at: float) -> bool:
        """Make ``state`` the next transition of ``key`` to write to the store (replacing one not
        written yet). True when no worker is writing ``key`` now: the caller starts one
        (``next_publication`` until None); else the worker writing it takes this one next."""
        with self._publish_lock:
            self._to_publish[key] = (state, opened_at)
            if key in self._publishing:
                return False
            self._publishing.add(key)
            return True

    def next_publication(self, key: str) -> tuple[str, float] | None:
        """The transition of ``key`` to write next, or None: then the worker writing ``key`` is
        done, and the next ``queue_publication`` starts another."""
        with self._publish_lock:
            latest = self._to_publish.pop(key, None)
            if latest is None:
                self._publishing.discard(key)
            return latest

    def busy_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a scheduler of these limits has calls running or waiting on ``loop``. Called
        on ``loop``'s own thread (which then runs none of them): a sync call made there that has
        to wait for a slot could wait for one of those calls, which cannot move on until the
        thread returns to its loop."""
        with self._listeners_lock:
            listeners = list(self._listeners)
        for scheduler in listeners:
            used = scheduler._loop
            if used is not None and used() is loop and scheduler._tasks:
                return True
        return False

    @contextlib.contextmanager
    def adopting(self) -> Iterator[None]:
        """Transitions in this thread inside the block came from another process: not published back."""
        self._adopting.active = True
        try:
            yield
        finally:
            self._adopting.active = False

    def _breaker_changed(self, key: str, old: BreakerState, new: BreakerState) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for number, scheduler in enumerate(listeners):
            scheduler._breaker_event(key, old, new, number == 0)
        if getattr(self._adopting, "active", False) or new is BreakerState.HALF_OPEN:
            return
        opened_at = time.time()
        if new is BreakerState.OPEN:
            self.opened_wall[key] = opened_at
        for scheduler in listeners:
            if scheduler._publish_breaker(key, new, opened_at):
                break

    # --- admission (all with ``lock`` held) -----------------------------------------------------

    def start_now(self, call: ToolCall, limits: ToolLimits, parent: Waiter | None = None) -> Waiter | None:
        """The fast path: start ``call`` at once when nothing waits (in any scheduler: else it
        queues behind them) and every limit has room; else, for a nested call (made while
        ``parent``'s tool runs), as ``start_nested``; else None (it must queue)."""
        if self.queue.size or self.refusing is not None or not self.has_room(call, limits):
            return None if parent is None else self.start_nested(call, limits, parent)
        waiter = Waiter(call, limits, 0.0, self)  # queued_at is read only for calls that waited
        self.start(waiter)
        waiter.parent = parent  # started at once: still a link of the chain of ancestors
        return waiter

    def start_nested(
        self, call: ToolCall, limits: ToolLimits, parent: Waiter, prefer_tool: bool = False
    ) -> Waiter | None:
        """A nested call (made while ``parent``'s tool runs) that ``start_now`` could not start:
        start it at once under its ancestors' slots when every full limit it needs has an
        ancestor's slot to borrow, else None (it queues like any call).

        ``prefer_tool``: also borrow an ancestor's slot of the call's tool while the local limit
        has room (a scheduler with cross-process leases: that slot's lease covers the nested call,
        where a lease of its own may never come while the parents in every process hold them)."""
        if self.refusing is not None:
            return None
        plan = self._borrow_plan(call, limits, parent, prefer_tool)
        if not plan:  # None: a full limit no ancestor can lend; {}: nothing full, wait your turn
            return None
        if limits.rate is not None and not self._bucket(call.tool, limits).try_take():
            return None
        waiter = Waiter(call, limits, 0.0, self)
        waiter.parent = parent
        self._lend(waiter, plan)
        self.start(waiter)
        return waiter

    def _borrow_plan(
        self, call: ToolCall, limits: ToolLimits, parent: Waiter, prefer_tool: bool = False
    ) -> dict[str, Waiter] | None:
        """For each limit ``call`` finds full, the nearest ancestor (from ``parent`` up) holding an
        unlent slot of it; None when some full limit has none ({} when no limit is full).
        ``prefer_tool``: the tool's limit is borrowed when an ancestor can lend it, full or not."""
        config = self.config
        full: list[str] = []
        if config.max_concurrency is not None and self.in_flight >= config.max_concurrency:
            full.append("global")
        if limits.concurrency is not None and (
            self.tool_in_flight.get(call.tool, 0) >= limits.concurrency
            or (prefer_tool and self._lender(parent, "tool", call.tool) is not None)
        ):
            full.append("tool")
        if not self.per_tool_only:
            if self._tenant_blocked(call.tenant):
                full.append("tenant")
            if self._agent_blocked(call.tenant, call.principal):
                full.append("principal")
        plan: dict[str, Waiter] = {}
        for dimension in full:
            lender = self._lender(parent, dimension, _dimension_key(call, dimension))
            if lender is None:
                return None
            plan[dimension] = lender
        return plan

    def _lender(self, parent: Waiter, dimension: str, key: object) -> Waiter | None:
        """The nearest running ancestor (``parent`` first) holding an unlent slot of ``dimension``
        counted for ``key`` in these limits, or None."""
        lender: Waiter | None = parent
        while lender is not None:
            if (
                lender.owner is self
                and lender.granted
                and not lender.finished
                and (lender.lent is None or dimension not in lender.lent)
                and _dimension_key(lender.call, dimension) == key
            ):
                return lender
            lender = lender.parent
        return None

    @staticmethod
    def _lend(waiter: Waiter, plan: dict[str, Waiter]) -> None:
        """Record that ``waiter`` runs under the slots of ``plan`` (lock held)."""
        waiter.borrowed = dict(plan)
        for dimension, lender in plan.items():
            if lender.lent is None:
                lender.lent = {}
            lender.lent[dimension] = waiter

    def _start_nested_waiting(self) -> None:
        """Start queued nested calls that can now run under an ancestor's slot (lock held)."""
        for waiter in list(self.nested_waiting):
            if waiter.granted or not waiter.queued or not waiter.alive or waiter.future.done():
                self.nested_waiting.discard(waiter)
                continue
            assert waiter.parent is not None
            plan = self._borrow_plan(waiter.call, waiter.limits, waiter.parent)
            if not plan:
                continue
            limits = waiter.limits
            if limits.rate is not None:
                bucket = self._bucket(waiter.call.tool, limits)
                if not bucket.try_take():
                    self._arm(time.monotonic() + bucket.wait_s())
                    continue
            self.queue.discard(waiter)
            if self._wake(waiter):
                self._lend(waiter, plan)
                self.start(waiter)
            else:
                self.nested_waiting.discard(waiter)

    def enqueue(
        self,
        call: ToolCall,
        limits: ToolLimits,
        priority: PriorityClass,
        traced: bool,
        future: Signal,
        metrics: SchedulerMetrics,
        loop: asyncio.AbstractEventLoop | None = None,
        parent: Waiter | None = None,
    ) -> Waiter:
        """The slow path: queue ``call`` fairly; ``future`` is set when it starts. Raises
        ``Overloaded`` when the queue is full, ``SchedulingError`` after ``refuse_waiting``.

        ``metrics``: the queueing scheduler's, which counts the ``queued`` or ``shed`` event.
        ``loop``: given when ``future`` is an asyncio future of that loop, called from its thread
        (it is then resolved on that thread); None when ``future`` is thread-safe.
        ``parent``: the running attempt this call was made from (a nested call), which lets the
        call start under an ancestor's slot once one is free to lend (``_start_nested_waiting``).
        """
        if self.refusing is not None:
            raise SchedulingError(self.refusing)
        waiter = Waiter(call, limits, time.monotonic(), self)
        waiter.future = future
        if loop is not None:
            waiter.loop = loop
            waiter.thread = threading.get_ident()
        config = self.config
        share = self.shares.get(call.tenant)
        if share is None:
            if len(self.shares) >= PER_NAME_STATE:
                self.shares.clear()  # derived from the config: made again when asked
            share = self.shares[call.tenant] = config.tenant_share(call.tenant)
        queue = self.queue
        full = None
        if queue.size >= config.max_queued:
            full = "max_queued"
        elif share.max_queued is not None and queue.tenant_sizes.get(call.tenant, 0) >= share.max_queued:
            full = "tenant_max_queued"
        if full is not None:
            metrics.event("shed", call.tool, {"agentgate.tenant": call.tenant})
            raise Overloaded(
                f"tool {call.tool}: queue full for tenant {call.tenant!r} at its {full} "
                f"({queue.size} waiting, limit {config.max_queued}, tenant limit {share.max_queued})",
                limit=full,
            )
        queue.push_entry(
            waiter,
            priority.rank,
            priority.name,
            priority.weight,
            call.tenant,
            share.weight,
            call.principal,
            call.tool,
        )
        waiter.queued = True
        if parent is not None:
            waiter.parent = parent
            self.nested_waiting.add(waiter)
        if traced:
            metrics.event(
                "queued", call.tool, {"agentgate.tenant": call.tenant, "agentgate.priority": priority.name}
            )
        else:
            metrics.tally("queued", call.tool)
        # A tool at its concurrency limit starts nothing now; a rate-limited one needs its timer armed.
        if limits.rate is not None or (
            limits.concurrency is None or self.tool_in_flight.get(call.tool, 0) < limits.concurrency
        ):
            self.dispatch(call.tool)
        return waiter

    def has_room(self, call: ToolCall, limits: ToolLimits) -> bool:
        """Can ``call`` start now? Takes the rate token when it can (so: call once, then start)."""
        config = self.config
        if config.max_concurrency is not None and self.in_flight >= config.max_concurrency:
            return False
        if limits.concurrency is not None and self.tool_in_flight.get(call.tool, 0) >= limits.concurrency:
            return False
        if not self.per_tool_only and (
            self._tenant_blocked(call.tenant) or self._agent_blocked(call.tenant, call.principal)
        ):
            return False
        return limits.rate is None or self._bucket(call.tool, limits).try_take()

    def _bucket(self, tool: str, limits: ToolLimits) -> TokenBucket:
        bucket = self.buckets.get(tool)
        if bucket is None:
            assert limits.rate is not None
            if len(self.buckets) >= PER_NAME_STATE:  # a full bucket is what a new one would be
                self.buckets = {name: kept for name, kept in self.buckets.items() if kept.level < kept.burst}
            bucket = self.buckets[tool] = TokenBucket(limits.rate.per_second, limits.rate.burst)
        return bucket

    def _tenant_blocked(self, tenant: str) -> bool:
        limit = self.config.tenant_share(tenant).concurrency
        return limit is not None and self.tenant_in_flight.get(tenant, 0) >= limit

    def _agent_blocked(self, tenant: str, principal: str) -> bool:
        limit = self.config.principal_concurrency
        return limit is not None and self.principal_in_flight.get((tenant, principal), 0) >= limit

    def _tool_open(self, tool: str) -> bool:
        """Can ``tool`` start an attempt now? Notes the earliest rate-token time when it cannot."""
        limits = self.limits_cache.get(tool) or self.tool_limits(tool)
        if limits.concurrency is not None and self.tool_in_flight.get(tool, 0) >= limits.concurrency:
            return False
        if limits.rate is not None:
            wait = self._bucket(tool, limits).wait_s()
            if wait > 0:
                self._rate_wait = min(self._rate_wait, wait)
                return False
        return True

    def start(self, waiter: Waiter) -> None:
        """Count ``waiter``'s slots as taken (not those it borrows from an ancestor)."""
        call = waiter.call
        waiter.granted = True
        if waiter.parent is not None:
            self.nested_waiting.discard(waiter)
            if waiter.borrowed:
                self._start_borrowing(waiter)
                return
        self.in_flight += 1
        self.tool_in_flight[call.tool] = self.tool_in_flight.get(call.tool, 0) + 1
        if not self.per_tool_only:  # the tenant and principal counts matter only to their limits
            self.tenant_in_flight[call.tenant] = self.tenant_in_flight.get(call.tenant, 0) + 1
            agent = (call.tenant, call.principal)
            self.principal_in_flight[agent] = self.principal_in_flight.get(agent, 0) + 1

    def _start_borrowing(self, waiter: Waiter) -> None:
        """``start`` for an attempt running under borrowed slots: only its own ones are counted."""
        call = waiter.call
        borrowed = waiter.borrowed
        assert borrowed is not None
        if "global" not in borrowed:
            self.in_flight += 1
        if "tool" not in borrowed:
            self.tool_in_flight[call.tool] = self.tool_in_flight.get(call.tool, 0) + 1
        if not self.per_tool_only:
            if "tenant" not in borrowed:
                self.tenant_in_flight[call.tenant] = self.tenant_in_flight.get(call.tenant, 0) + 1
            if "principal" not in borrowed:
                agent = (call.tenant, call.principal)
                self.principal_in_flight[agent] = self.principal_in_flight.get(agent, 0) + 1

    def finish(self, waiter: Waiter) -> None:
        """Give ``waiter``'s slots back and start the fairest waiting calls that now have room.

        A borrowed slot goes back to its lender; a slot this attempt lent to a nested call that
        still runs passes to that call, which then gives it back itself."""
        call = waiter.call
        waiter.finished = True
        if waiter.borrowed or waiter.lent:
            self._finish_lending(waiter)
        else:
            self.in_flight -= 1
            _decrement(self.tool_in_flight, call.tool)
            if not self.per_tool_only:
                _decrement(self.tenant_in_flight, call.tenant)
                _decrement(self.principal_in_flight, (call.tenant, call.principal))
        if self.queue.size:  # ``dispatch``, written out: this runs once per attempt
            if self.per_tool_only:
                self._dispatch_tool(call.tool)
            else:
                self._dispatch_queue(None)
            if self.nested_waiting:
                self._start_nested_waiting()

    def _finish_lending(self, waiter: Waiter) -> None:
        """``finish``'s counting for an attempt that borrowed or lent slots (lock held)."""
        call = waiter.call
        borrowed = waiter.borrowed or {}
        lent = waiter.lent or {}
        waiter.borrowed = waiter.lent = None
        for dimension in _DIMENSIONS:
            heir = lent.get(dimension)
            source = borrowed.get(dimension)
            if heir is not None:  # still running: it keeps the slot, counted as before
                assert heir.borrowed is not None
                if source is not None:
                    heir.borrowed[dimension] = source
                    assert source.lent is not None
                    source.lent[dimension] = heir
                else:
                    del heir.borrowed[dimension]  # now its own: given back when it finishes
                    if dimension == "tool":  # and the slot's cross-process lease with it
                        heir.lease, waiter.lease = waiter.lease, None
            elif source is not None:
                assert source.lent is not None
                del source.lent[dimension]
            elif dimension == "global":
                self.in_flight -= 1
            elif dimension == "tool":
                _decrement(self.tool_in_flight, call.tool)
            elif self.per_tool_only:
                continue
            elif dimension == "tenant":
                _decrement(self.tenant_in_flight, call.tenant)
            else:
                _decrement(self.principal_in_flight, (call.tenant, call.principal))

    def abandon(self, waiter: Waiter) -> None:
        """A waiting call gives up (deadline, cancellation): out of the queue, or its slot back."""
        if waiter.granted:
            self.finish(waiter)
        elif waiter.queued:
            self.queue.discard(waiter)
            if waiter.parent is not None:
                self.nested_waiting.discard(waiter)

    def dispatch(self, tool: str | None = None) -> None:
        """Start waiting calls, fairest first, while limits have room; arm the rate timer if needed.
        Then start queued nested calls that can run under an ancestor's slot.

        ``tool``: only that tool's room can have changed (a call to it was queued, or it gave a
        slot back while no global, tenant or principal limit is configured), so only its
        waiting calls can start: after every dispatch, no other tool with waiting calls has room.
        """
        self._dispatch_queue(tool)
        if self.nested_waiting:
            self._start_nested_waiting()

    def _dispatch_queue(self, tool: str | None) -> None:
        """``dispatch``'s walk of the fair queue."""
        max_concurrency = self.config.max_concurrency
        if max_concurrency is not None and self.in_flight >= max_concurrency:
            return
        queue = self.queue
        self._rate_wait = _NEVER
        if tool is not None:
            open_tools = {tool} if tool in queue.tool_sizes and self._tool_open(tool) else set()
        else:
            open_tools = {name for name in queue.tool_sizes if self._tool_open(name)}
        per_tool_only = self.per_tool_only
        while open_tools and (max_concurrency is None or self.in_flight < max_concurrency):
            waiter = queue.pop(
                open_tools,
                None if per_tool_only else self._tenant_blocked,
                None if per_tool_only else self._agent_blocked,
            )
            if waiter is None:
                break
            started = waiter.call.tool
            future = waiter.future
            # done: its caller was cancelled after it was picked. Read from another thread, a
            # cancellation can be missed: then the caller finds its slot granted and gives it back.
            if not future.done() and self._wake(waiter):
                if waiter.limits.rate is not None:
                    self._bucket(started, waiter.limits).try_take()
                self.start(waiter)
            if started not in queue.tool_sizes or not self._tool_open(started):
                open_tools.discard(started)
        if queue.size and self._rate_wait != _NEVER:
            self._arm(time.monotonic() + self._rate_wait)

    def _dispatch_tool(self, tool: str) -> None:
        """``_dispatch_queue(tool)`` without global, tenant or principal limits (``per_tool_only``):
        the common dispatch after a slot of ``tool`` came free, without the general walk's set of
        open tools (the queue serves one tool with ``pop_tool``)."""
        queue = self.queue
        tool_sizes = queue.tool_sizes
        self._rate_wait = _NEVER
        while tool in tool_sizes and self._tool_open(tool):
            waiter = queue.pop_tool(tool)
            # done: its caller was cancelled after it was picked (see ``_dispatch_queue``).
            if not waiter.future.done() and self._wake(waiter):
                if waiter.limits.rate is not None:
                    self._bucket(tool, waiter.limits).try_take()
                self.start(waiter)
        if queue.size and self._rate_wait != _NEVER:
            self._arm(time.monotonic() + self._rate_wait)

    @staticmethod
    def _wake(waiter: Waiter) -> bool:
        """Tell ``waiter`` it starts (lock held; it is counted started right after). False when it
        never can: its loop is closed, so no task of it runs again (``loop.close()`` cancels
        nothing) and a slot granted to it would never be given back."""
        loop = waiter.loop
        if loop is None:
            waiter.future.set_result(None)
            return True
        if loop.is_closed():
            return False
        if waiter.thread == threading.get_ident():
            # On the loop's own thread, resolved directly (a closed loop's future cannot be: a
            # thread that closed its loop and went on may be the one giving a slot back).
            waiter.future.set_result(None)
            return True
        try:
            loop.call_soon_threadsafe(_resolve, waiter.future)
        except RuntimeError:
            return False
        return True

    def refuse_waiting(self, reason: str) -> int:
        """From now on no call starts: every waiting call (of any scheduler) is refused with
        ``SchedulingError(reason)``, and so is every call that asks to start later (a new call,
        a retry). Calls already running are left to finish. Returns how many waiting calls were
        refused. Used when the owner of these limits (a Gate) closes: what is still queued then
        must not start after its outcome can no longer be recorded."""
        refused = 0
        with self.lock:
            self.refusing = reason
            queue = self.queue
            while queue.size:
                waiter = queue.pop(set(queue.tool_sizes), None, None)
                if waiter is None:
                    break
                waiter.queued = False  # out of the queue: nothing for ``abandon`` to discard
                refused += 1
                _refuse(waiter, reason)
            self.nested_waiting.clear()
        return refused

    # --- the rate timer -------------------------------------------------------------------------

    def _arm(self, at: float) -> None:
        """Have the timer thread dispatch at ``at`` (monotonic) unless it will sooner (lock held)."""
        if self._stopped or at >= self._timer_at:
            return
        self._timer_at = at
        if self._timer is None:
            # The thread holds these limits weakly: limits dropped without ``close`` (a scheduler
            # made per job and never closed) end their timer thread instead of leaking it.
            self._timer = threading.Thread(
                target=_run_timer,
                args=(weakref.ref(self), self.lock, self._timer_wake),
                name="agentgate-rate-timer",
                daemon=True,
            )
            self._timer.start()
            finalizer = weakref.finalize(self, _wake_timer, self._timer_wake, self._timer)
            finalizer.atexit = False  # type: ignore[misc]  # a documented attribute the stubs miss
        else:
            self._timer_wake.notify()

    def close(self) -> None:
        """Stop and join the rate timer thread; waiting rate-limited calls then start only when a slot comes free."""
        with self.lock:
            self._stopped = True
            self._timer_wake.notify()
            timer = self._timer
        if timer is not None and timer is not threading.current_thread():
            timer.join()


def _run_timer(ref: weakref.ref[SharedLimits], lock: threading.Lock, wake: threading.Condition) -> None:
    """The rate timer thread of the limits ``ref`` names: dispatch when the next token is due,
    until they are closed or collected."""
    with lock:
        while (limits := ref()) is not None and not limits._stopped:
            delay = limits._timer_at - time.monotonic()
            if delay <= 0:
                limits._timer_at = _NEVER
                limits.dispatch()
                continue
            # At most a day at once: a lock cannot wait longer (a token due in 1e300 s)
            timeout = None if limits._timer_at == _NEVER else min(delay, _LONGEST_TIMER_WAIT_S)
            del limits  # not held while waiting, so that the limits can be collected
            if ref() is None:
                return
            wake.wait(timeout)


def _wake_timer(wake: threading.Condition, timer: threading.Thread) -> None:
    """Wake the timer thread of limits that were collected, so that it ends. Not from that
    thread itself: it holds the lock then, and checks for itself before it waits."""
    if timer is not threading.current_thread():
        with wake:
            wake.notify()


def _refuse(waiter: Waiter, reason: str) -> None:
    """Tell a waiting call it will not start (lock held): a sync caller's signal is cancelled, an
    async caller's future fails with ``SchedulingError`` on its own loop (a closed loop: nothing
    of it runs again)."""
    future = waiter.future
    loop = waiter.loop
    if loop is None:  # a thread-safe signal: its caller raises SchedulingError when cancelled
        future.cancel()
        return
    if loop.is_closed():
        return
    if waiter.thread == threading.get_ident():
        _fail(future, reason)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_fail, future, reason)


def _fail(future: Signal, reason: str) -> None:
    if not future.done() and isinstance(future, asyncio.Future):
        future.set_exception(SchedulingError(reason))


def _decrement(counts: dict[Any, int], key: Any) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
