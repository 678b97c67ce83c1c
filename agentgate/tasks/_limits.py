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

The limits are one object made of parts, one module per concern, as ``Scheduler`` is: this
module holds the counts, the fair queue and admission (start at once, queue, dispatch, finish);
``_breaker_sharing.py`` the breakers and the schedulers told of their transitions;
``_lending.py`` how a nested call borrows a slot its ancestor holds; ``_rate_timer.py`` the timer
thread that starts rate-limited waiting calls. A waiting call is a ``Waiter`` (``_waiter.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agentgate._shown import quoted
from agentgate.errors import InputError, Overloaded, SchedulingError
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState, CircuitBreaker
from agentgate.tasks._breaker_sharing import _BreakerSharing
from agentgate.tasks._call import PER_NAME_STATE, ToolCall
from agentgate.tasks._config import PriorityClass, SchedulerConfig, TenantShare, ToolLimits
from agentgate.tasks._fair import FairQueue
from agentgate.tasks._lending import _decrement, _Lending
from agentgate.tasks._metrics import SchedulerMetrics
from agentgate.tasks._rate_timer import _NEVER, _RateTimer
from agentgate.tasks._token_bucket import TokenBucket
from agentgate.tasks._waiter import Signal, Waiter

if TYPE_CHECKING:
    from agentgate.tasks._scheduler import Scheduler


#: How often the timer thread looks for loops closed under their calls while calls that may wait
#: for them are queued (as ``Gate.close`` does while it waits for calls of other loops).
CLOSED_LOOP_POLL_S = 0.05


def _resolve(future: Signal) -> None:
    if not future.done():
        future.set_result(None)


class SharedLimits(_BreakerSharing, _Lending, _RateTimer):
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
        #: ``buckets`` size at which the full ones are dropped; then twice the buckets kept (at
        #: least ``PER_NAME_STATE``), so each new tool name costs amortized O(1) (review R93).
        self.buckets_sweep_at = PER_NAME_STATE
        self.limits_cache: dict[str, ToolLimits] = {}
        self.shares: dict[str, TenantShare] = {}
        self.breakers: dict[str, CircuitBreaker] = {}
        self.tool_breakers: dict[str, CircuitBreaker] = {}  # tool -> its default breaker
        #: Wall time this process knows each breaker opened (cross-process breaker sharing).
        self.opened_wall: dict[str, float] = {}
        #: The newest transition this process knows of each breaker, its own or one adopted from the
        #: store: (wall time, whether to open). A row no newer is not adopted (``_sync_breaker``).
        self.breaker_latest: dict[str, tuple[float, bool]] = {}
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
        #: Breaker key -> its latest transition not yet written to the store (state, opened_at,
        #: generation), and the keys a store worker is writing now: one at a time per key, so in order.
        self._to_publish: dict[str, tuple[str, float, int]] = {}
        #: Breaker key -> this process's transitions of it made, and those written.
        self._made: dict[str, int] = {}
        self._written: dict[str, int] = {}
        #: Breaker key -> its latest transition whose write failed (or that no scheduler could
        #: publish), written again at a scheduler's next check of the key (``_sync_breaker``).
        self._unwritten: dict[str, tuple[str, float, int]] = {}
        self._publishing: set[str] = set()
        self._publish_lock = threading.Lock()
        #: Set by ``refuse_waiting``: why no call starts any more (None: calls start).
        self.refusing: str | None = None
        #: Queued nested calls, in arrival order (a dict: a set's order is its hashes', and siblings
        #: of one agent and tool started out of order), each with its place in that order (its
        #: first ``seq`` in the queue): started by ``_start_nested_waiting`` once an ancestor can lend.
        self.nested_waiting: dict[Waiter, int] = {}
        #: Running attempt of these limits -> the queued nested calls under it (at any depth), in
        #: arrival order: those ``reclass_nested`` moves when its class changes, and those a
        #: finish giving it back a lent slot may start, found without walking every queued nested
        #: call (until review R69: each join, leave and finish visited all).
        self.nested_under: dict[Waiter, dict[Waiter, None]] = {}
        #: Tool -> the queued nested calls under a running call to it, in arrival order: those a
        #: call queued for it while it is full lifts (``lend_priority``; review R69).
        self.nested_under_tool: dict[str, dict[Waiter, None]] = {}
        #: Slot (("tool", tool), ("tenant", tenant), ("principal", (tenant, agent))) -> the queued
        #: nested calls counting against it, in arrival order: those a finish freeing such a slot
        #: may start (``_unblocked``; review R69).
        self.nested_by: dict[tuple[str, object], dict[Waiter, None]] = {}
        #: Queued nested calls waiting at a class more urgent than their own, lent by calls
        #: waiting for their ancestors' slots: moved back down when those leave (``take_back``).
        self.lifted: dict[Waiter, None] = {}
        #: The event loops schedulers of these limits have run calls on, not yet found closed
        #: (weakly: a Gate's scheduler lives as long as its loop). ``reclaim_closed`` gives back
        #: the slots of the calls of one found closed under them.
        self.loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
        #: Whether the timer thread looks for closed loops (``poll_closed``).
        self.polling_closed = False
        #: Calls of a closed loop whose coroutine, collected while the lock was taken, left their
        #: give-back to the lock's next holder (``Scheduler._give_back_closed``; appended without
        #: the lock): ``reclaim_closed`` gives them back.
        self.closed_calls: collections.deque[tuple[Scheduler, Waiter]] = collections.deque()

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

    # --- admission (all with ``lock`` held) -----------------------------------------------------

    def note_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """A scheduler of these limits runs calls on ``loop`` (once per scheduler and loop). The
        loops found closed meanwhile are given up first (``reclaim_closed``): a process that runs
        each request in an ``asyncio.run`` of its own keeps about one here, not one per request
        (until R95's regression review the list grew by one a loop, and each new loop read it all)."""
        self.reclaim_closed()
        if all(known() is not loop for known in self.loops):
            self.loops.append(weakref.ref(loop))

    def admission(self, breaker: CircuitBreaker) -> int | BreakerSnapshot:
        """``breaker.admission()`` for a call of either scheduler (lock not held); when it refuses
        as half open (its probes all taken), asked again once the probes held by calls of event
        loops closed under them went back (``reclaim_closed``): such a probe never ends. (Until
        R95's regression review only the async scheduler asked again: a process of sync calls
        alone, ``Gate.run``, was refused until an async call or a close reclaimed the probe.)"""
        admitted = breaker.admission()
        if (
            isinstance(admitted, BreakerSnapshot)
            and admitted.state is BreakerState.HALF_OPEN
            and (self.loops or self.closed_calls)
        ):
            with self.lock:
                self.reclaim_closed()
            admitted = breaker.admission()
        return admitted

    def reclaim_closed(self) -> None:
        """Give back the slots (leases, half-open probes) of calls whose event loop was closed
        under them, in every scheduler of these limits (``Scheduler._reclaim_closed``): no task of
        a closed loop runs again, and its calls would keep their slots for good. Asked when a call
        must wait for a slot (``enqueue``), when a half-open breaker refuses for want of a probe
        (``admission``), when a scheduler notes a new loop (``note_loop``), by the timer thread's
        poll (``poll_closed``), by ``Scheduler.aclose`` and by ``Gate.close``; a loop found
        closed is forgotten (it never runs another call), so it costs a look at each live loop's
        ``is_closed``. The calls left in ``closed_calls`` are given back first, and again last:
        a collection during the pass (on this thread, the lock held) may leave one there, its
        scheduler and loop already gone from what the pass reads (the R96 regression review)."""
        if self.closed_calls:
            self._give_back_left()
        for known in self.loops:  # the common case, none closed: no list made (a queued call's cost)
            if (loop := known()) is None or loop.is_closed():
                self.loops = [
                    known for known in self.loops if (live := known()) is not None and not live.is_closed()
                ]
                with self._listeners_lock:
                    schedulers = list(self._listeners)
                for scheduler in schedulers:
                    scheduler._reclaim_closed()
                break
        if self.closed_calls:
            self._give_back_left()

    def _give_back_left(self) -> None:
        """Give back the calls left in ``closed_calls`` (lock held)."""
        closed_calls = self.closed_calls
        while closed_calls:
            scheduler, waiter = closed_calls.popleft()
            scheduler._closed_under(waiter)

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
        if self.loops or self.closed_calls:
            self.reclaim_closed()  # a slot held by a call of a closed loop is free to take
            if loop is None or len(self.loops) > 1:
                # It may wait for a call of another loop (its own is among ``loops``), and nothing
                # tells of that loop's close: the timer thread looks every ``CLOSED_LOOP_POLL_S``
                # while calls wait (``poll_closed``). Not for the one loop of a process.
                self.polling_closed = True
                self._arm(time.monotonic() + CLOSED_LOOP_POLL_S)
        own = priority
        lent = False
        if parent is not None:  # its ancestors wait for it, holding their slots
            priority, lent = self._inherited_priority(priority, parent)
        waiter = Waiter(call, limits, time.monotonic(), self)
        waiter.future = future
        waiter.urgency = own
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
                f"tool {call.tool}: queue full for tenant {quoted(call.tenant)} at its {full} "
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
            call.agent_key,
            call.tool,
        )
        waiter.queued = True
        if (
            self.nested_waiting
            and limits.concurrency is not None
            and self.tool_in_flight.get(call.tool, 0) >= limits.concurrency
        ):
            self.lend_priority(call.tool, priority)  # nested calls this call waits for go first
        if parent is not None:
            waiter.parent = parent
            self._nest(waiter)
            if lent:  # by a call waiting for an ancestor's slot: taken back when it leaves
                self.lifted[waiter] = None
        if traced:
            metrics.event(
                "queued", call.tool, {"agentgate.tenant": call.tenant, "agentgate.priority": priority.name}
            )
        elif loop is not None:
            # An event loop's scheduler, on that loop's thread: its events are written there only,
            # so counted without the metrics' lock, as its attempt loop counts ``started`` (review R72).
            events = metrics.events
            counted = ("queued", call.tool)
            count = events.get(counted)
            if count is None:  # a new name: past MAX_LABEL_VALUES, counted as OTHER
                counted, count = metrics._admit("queued", call.tool)
            events[counted] = count + 1
        else:
            metrics.tally("queued", call.tool)
        # A tool at its concurrency limit starts nothing now; a rate-limited one needs its timer armed.
        if limits.rate is not None or (
            limits.concurrency is None or self.tool_in_flight.get(call.tool, 0) < limits.concurrency
        ):
            # Of the queued nested calls only this one can start by borrowing now: the others
            # could not at the last dispatch or finish, and since then slots were only taken.
            self.dispatch(call.tool, () if parent is None else (waiter,))
        return waiter

    def poll_closed(self) -> None:
        """The timer thread's look for loops closed under their calls while calls wait (lock held):
        until review R96 a call queued before the slot holder's loop closed waited until another
        call queued (a hang in a quiet process). Armed by ``enqueue`` only for a call that may wait
        for another loop's call (a sync call, or a call of one loop among several): a process of
        one event loop, or of sync calls alone, never polls. Once armed it looks every
        ``CLOSED_LOOP_POLL_S`` while any call waits and a loop is known, the sync call that armed
        it gone or not (about 0.2 ms of CPU a look with one tool queued, 1 ms with 2,000: the R96
        regression review), and stops when the queue empties."""
        self.reclaim_closed()
        if self.queue.size and self.loops:
            self._arm(time.monotonic() + CLOSED_LOOP_POLL_S)
        else:
            self.polling_closed = False

    def hasten(self, waiter: Waiter, priority: PriorityClass) -> None:
        """A call joined the outcome of ``waiter``'s call (its twin: the same idempotency key) at
        ``priority``: while ``waiter`` waits in the queue at a less urgent rank, it moves to the
        tail of its tool's FIFO at ``priority`` (its tenant and agent kept), so the joined call
        does not wait behind calls less urgent than itself. Counted once throughout (no second
        ``queued``, no queue bound asked again). A waiter granted, or no longer waiting, is left
        as it is. (Until review R58 an urgent call joining a low-class twin waited at the low
        rank: behind every call of the ranks between.)

        Its ``urgency`` becomes ``priority``: a nested call of it inherits that class (review
        R68), and those already queued move up to it while it runs (``reclass_nested``)."""
        own = waiter.urgency
        if own is None or priority.rank < own.rank:
            waiter.urgency = priority
        if self._moved_as_nested(waiter):
            return
        queue = self.queue
        if queue.rank_of(waiter) <= priority.rank:
            return
        tenant = waiter.call.tenant
        share = self.shares.get(tenant) or self.config.tenant_share(tenant)
        queue.move(waiter, priority.rank, priority.name, priority.weight, share.weight)

    def slow(self, waiter: Waiter, priority: PriorityClass) -> None:
        """The calls joined to ``waiter``'s call that made it wait at a more urgent class stopped
        waiting (cancelled, their deadlines passed): ``priority`` is now the most urgent class
        among the callers still waiting on it. While ``waiter`` waits in the queue at another
        class, it moves to ``priority``, at the place its first arrival gives it among that
        class's calls of its tenant, agent and tool (``FairQueue.move``'s ``back``), counted once
        throughout. A waiter granted, or no longer waiting, is left as it is. (Until review R59
        the twin kept the class of a joiner that had left, and started before calls of its own
        class that had come before it.)

        Its ``urgency`` becomes ``priority``: nested calls it made that wait move back with it,
        and a nested twin itself stays at a class it inherits (review R68)."""
        waiter.urgency = priority
        if self._moved_as_nested(waiter):
            return
        queue = self.queue
        if waiter.path[1].key == priority.name and queue.rank_of(waiter) == priority.rank:
            return
        tenant = waiter.call.tenant
        share = self.shares.get(tenant) or self.config.tenant_share(tenant)
        queue.move(waiter, priority.rank, priority.name, priority.weight, share.weight, back=True)

    def _moved_as_nested(self, waiter: Waiter) -> bool:
        """``hasten``'s and ``slow``'s first step, ``waiter``'s ``urgency`` set: the queued nested
        calls of a granted ``waiter`` move to the class they inherit now (``reclass_nested``), a
        queued nested twin to the most urgent of its own and what it inherits (``reclass``).
        False only for a queued call with no parent, which the caller moves itself; True when
        all is done (or ``waiter`` no longer waits)."""
        if waiter.granted:
            if not waiter.finished and self.nested_waiting:
                self.reclass_nested(waiter)
            return True
        if waiter.queued and waiter.alive and waiter.parent is not None:
            self.reclass(waiter)
            return True
        return not waiter.queued or not waiter.alive

    def has_room(self, call: ToolCall, limits: ToolLimits, *, take: bool = True) -> bool:
        """Can ``call`` start now? Takes the rate token when it can (so: call once, then start);
        ``take=False`` only asks, the token left in the bucket."""
        config = self.config
        if config.max_concurrency is not None and self.in_flight >= config.max_concurrency:
            return False
        if limits.concurrency is not None and self.tool_in_flight.get(call.tool, 0) >= limits.concurrency:
            return False
        if not self.per_tool_only and (
            self._tenant_blocked(call.tenant) or self._agent_blocked(call.tenant, call.agent_key)
        ):
            return False
        if limits.rate is None:
            return True
        bucket = self._bucket(call.tool, limits)
        return bucket.try_take() if take else bucket.wait_s() == 0.0

    def holding_back(self, waiter: Waiter) -> str:
        """What keeps ``waiter``'s call waiting now, in words, for the error of a call whose
        deadline passed in the queue: the first full limit (global, the tool's, the tenant's, the
        agent's), else its tool's rate limit, else its turn (calls queued before it, or more
        urgent ones, start first). Reads the state only: no token is taken."""
        if waiter.granted:
            return "a slot, granted only as its deadline passed"
        call, limits, config = waiter.call, waiter.limits, self.config
        if config.max_concurrency is not None and self.in_flight >= config.max_concurrency:
            return f"the global concurrency limit ({config.max_concurrency})"
        if limits.concurrency is not None and self.tool_in_flight.get(call.tool, 0) >= limits.concurrency:
            return f"tool {call.tool}'s concurrency limit ({limits.concurrency})"
        if self._tenant_blocked(call.tenant):
            limit = config.tenant_share(call.tenant).concurrency
            return f"tenant {quoted(call.tenant)}'s concurrency limit ({limit})"
        if self._agent_blocked(call.tenant, call.agent_key):
            key = "" if call.holder is None else f", counted by key {call.holder}"
            return (
                f"agent {quoted(call.principal)}'s concurrency limit ({config.principal_concurrency}{key}, "
                f"tenant {quoted(call.tenant)})"
            )
        if limits.rate is not None:
            wait = self._bucket(call.tool, limits).wait_s()
            if wait > 0:
                return f"tool {call.tool}'s rate limit (a token in {wait:.3f}s)"
        return "its turn (calls queued before it, or of a more urgent class, start first)"

    def _bucket(self, tool: str, limits: ToolLimits) -> TokenBucket:
        bucket = self.buckets.get(tool)
        if bucket is None:
            assert limits.rate is not None
            if len(self.buckets) >= self.buckets_sweep_at:  # a full bucket is what a new one would be
                self.buckets = {name: kept for name, kept in self.buckets.items() if kept.level < kept.burst}
                # Until review R93 the next new name swept again when none was full: a scan of
                # every bucket per new name, without end while invented names came faster than
                # buckets refilled.
                self.buckets_sweep_at = max(PER_NAME_STATE, 2 * len(self.buckets))
            bucket = self.buckets[tool] = TokenBucket(limits.rate.per_second, limits.rate.burst)
        return bucket

    def _tenant_blocked(self, tenant: str) -> bool:
        limit = self.config.tenant_share(tenant).concurrency
        return limit is not None and self.tenant_in_flight.get(tenant, 0) >= limit

    def _agent_blocked(self, tenant: str, principal: str) -> bool:
        limit = self.config.principal_concurrency
        return limit is not None and self.principal_in_flight.get((tenant, principal), 0) >= limit

    def _tool_open(self, tool: str, limits: ToolLimits | None = None) -> bool:
        """Can ``tool`` start an attempt now? Notes the earliest rate-token time when it cannot.
        ``limits``: the tool's, when the caller has looked them up already."""
        if limits is None:
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
        if self.lifted and waiter.queued:  # it left the queue: what it lent goes back
            self.lifted.pop(waiter, None)
            self.take_back()
        if waiter.parent is not None:
            self._unnest(waiter)
            if waiter.borrowed:
                self._start_borrowing(waiter)
                return
        self.in_flight += 1
        self.tool_in_flight[call.tool] = self.tool_in_flight.get(call.tool, 0) + 1
        if not self.per_tool_only:  # the tenant and principal counts matter only to their limits
            self.tenant_in_flight[call.tenant] = self.tenant_in_flight.get(call.tenant, 0) + 1
            agent = (call.tenant, call.agent_key)
            self.principal_in_flight[agent] = self.principal_in_flight.get(agent, 0) + 1

    def finish(self, waiter: Waiter) -> None:
        """Give ``waiter``'s slots back and start the fairest waiting calls that now have room.

        A borrowed slot goes back to its lender; a slot this attempt lent to a nested call that
        still runs passes to that call, which then gives it back itself."""
        call = waiter.call
        waiter.finished = True
        unblocking = self._unblocking(waiter) if self.nested_waiting else None
        only_tenant = None  # set when only this tenant's waiting calls can start now
        only_agent = None  # set when only this agent's can
        if waiter.borrowed or waiter.lent:
            self._finish_lending(waiter)
        else:
            max_concurrency = self.config.max_concurrency
            global_full = max_concurrency is not None and self.in_flight >= max_concurrency
            self.in_flight -= 1
            counts = self.tool_in_flight  # ``_decrement`` written out: once per attempt
            running = counts[call.tool]
            left = running - 1
            if left:
                counts[call.tool] = left
            else:
                del counts[call.tool]
            if not self.per_tool_only:
                limits = waiter.limits
                # Neither the global slot nor the tool's (its slot, or a rate token ``unused``
                # gave back) was what held waiting calls back: only its tenant's and agent's were.
                narrow = (
                    not global_full
                    and limits.rate is None
                    and (limits.concurrency is None or running < limits.concurrency)
                )
                tenant_full = narrow and self._tenant_blocked(call.tenant)  # before its slot is given back
                _decrement(self.tenant_in_flight, call.tenant)
                _decrement(self.principal_in_flight, (call.tenant, call.agent_key))
                if narrow:
                    only_tenant = call.tenant
                    if not tenant_full:  # nor its tenant's: only its agent's slot came free
                        only_agent = call.agent_key
        if self.queue.size:  # ``dispatch``, written out: this runs once per attempt
            if self.per_tool_only:
                self._dispatch_tool(call.tool)
            else:
                self._dispatch_queue(None, only_tenant, only_agent)
            if self.nested_waiting and unblocking is not None:
                # Only those it can unblock (until review R69 every queued nested call, each finish).
                self._start_nested_waiting(self._unblocked(waiter, *unblocking))

    def abandon(self, waiter: Waiter) -> None:
        """A waiting call gives up (deadline, cancellation): out of the queue, or its slot (and
        rate token) back."""
        if waiter.granted:
            self.unused(waiter)
            self.finish(waiter)
        elif waiter.queued:
            self.queue.discard(waiter)
            if waiter.parent is not None:
                self._unnest(waiter)
            if self.lifted:  # what it lent goes back
                self.lifted.pop(waiter, None)
                self.take_back()

    def unused(self, waiter: Waiter) -> None:
        """``waiter`` was granted its start but its attempt never runs (it left at the grant, or
        its deadline passed first): the rate token taken for it goes back, before ``finish``
        gives back its slots. (Until review R54 it was spent: with a rate of one a minute, a
        call granted as its deadline passed cost the next waiting call a minute.)"""
        limits = waiter.limits
        if limits.rate is not None:
            self._bucket(waiter.call.tool, limits).give_back()

    def dispatch(self, tool: str | None = None, nested: Iterable[Waiter] | None = None) -> None:
        """Start waiting calls, fairest first, while limits have room; arm the rate timer if needed.
        Then start queued nested calls that can run under an ancestor's slot.

        ``tool``: only that tool's room can have changed (a call to it was queued, or it gave a
        slot back while no global, tenant or principal limit is configured), so only its
        waiting calls can start: after every dispatch, no other tool with waiting calls has room.
        ``nested``: only these queued nested calls can start under an ancestor's slot (None: any).
        """
        self._dispatch_queue(tool)
        if self.nested_waiting:
            self._start_nested_waiting(nested)

    def _dispatch_queue(
        self, tool: str | None, only_tenant: str | None = None, only_agent: str | None = None
    ) -> None:
        """``dispatch``'s walk of the fair queue.

        ``only_tenant``: a finish freed only that tenant's (and one of its agents') slots, so
        only its waiting calls can start, every dispatch having left none that could (a call
        queued is dispatched at once, a slot or rate token given back by a finish, a token come
        with time by the rate timer). That holds only while no tool with calls waiting is rate
        limited (a token may have come since), else the whole queue is walked. The walk then
        passes no tenant at its limit: until review R93 each finish walked every tenant with a
        lower pass, blocked or not (about 5 ms per finish, under the lock, with 1,000 tenants
        at a limit of one). ``only_agent`` (one of ``only_tenant``'s agents): its tenant had
        room before the finish too, so only that agent's slot came free and only its calls can
        start; the walk passes no agent at its limit either (until review R93 about 4.5 ms per
        finish with 1,000 agents of one tenant at a ``principal_concurrency`` of one)."""
        max_concurrency = self.config.max_concurrency
        if max_concurrency is not None and self.in_flight >= max_concurrency:
            return
        queue = self.queue
        self._rate_wait = _NEVER
        if tool is not None:
            open_tools = {tool} if tool in queue.tool_sizes and self._tool_open(tool) else set()
        else:
            open_tools = set()
            for name in queue.tool_sizes:
                limits = self.limits_cache.get(name) or self.tool_limits(name)
                if limits.rate is not None:
                    only_tenant = only_agent = None
                if self._tool_open(name, limits):
                    open_tools.add(name)
        per_tool_only = self.per_tool_only
        while open_tools and (max_concurrency is None or self.in_flight < max_concurrency):
            waiter = queue.pop(
                open_tools,
                None if per_tool_only else self._tenant_blocked,
                None if per_tool_only else self._agent_blocked,
                only_tenant,
                only_agent,
            )
            if waiter is None:
                break
            started = waiter.call.tool
            future = waiter.future
            # done: its caller was cancelled after it was picked. Read from another thread, a
            # cancellation can be missed: then the caller finds its slot granted and gives it back.
            if future.done() or not self._wake(waiter):
                self._dropped(waiter)
            else:
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
        limits = self.limits_cache.get(tool) or self.tool_limits(tool)
        if limits.rate is None:
            # ``_tool_open`` written out for a tool without a rate limit (no token time to note, so
            # no timer to arm): this loop runs after every finish while calls wait, and the check
            # that ends it (the slot just given back was taken) is the second of two per finish.
            concurrency = limits.concurrency
            in_flight = self.tool_in_flight
            while tool in tool_sizes and (concurrency is None or in_flight.get(tool, 0) < concurrency):
                waiter = queue.pop_tool(tool)
                future, loop = waiter.future, waiter.loop
                # done: its caller was cancelled after it was picked (see ``_dispatch_queue``).
                if future.done():
                    self._dropped(waiter)
                elif loop is not None and waiter.thread == threading.get_ident() and not loop.is_closed():
                    # ``_wake``'s common case written out: a waiter of this thread's open loop.
                    future.set_result(None)
                    self.start(waiter)
                elif self._wake(waiter):
                    self.start(waiter)
                else:
                    self._dropped(waiter)
            return
        while tool in tool_sizes and self._tool_open(tool):
            waiter = queue.pop_tool(tool)
            # done: its caller was cancelled after it was picked (see ``_dispatch_queue``).
            if waiter.future.done() or not self._wake(waiter):
                self._dropped(waiter)
            else:
                if waiter.limits.rate is not None:
                    self._bucket(tool, waiter.limits).try_take()
                self.start(waiter)
        if queue.size and self._rate_wait != _NEVER:
            self._arm(time.monotonic() + self._rate_wait)

    def _dropped(self, waiter: Waiter) -> None:
        """``waiter`` left the queue at its turn without starting: its loop is closed (``_wake``),
        so no task of it runs again, or its caller was cancelled (its future done) and gives it
        up (``abandon``) when its task next runs. It is no longer a queued nested call, and the
        class it lent goes back now (``take_back``), as when a waiting call leaves any other way
        (lock held). (Until review R69 only the next start, or the cancelled task's ``abandon``,
        took it back: a nested call it had lifted kept the lent class, and when that call was the
        next to start, started ahead of calls nobody urgent waited behind any more; a cancelled
        nested call stayed indexed, tests/test_tasks_r69_cancelled_at_turn.py.)"""
        if waiter.parent is not None:
            self._unnest(waiter)
        if self.lifted:
            self.lifted.pop(waiter, None)
            self.take_back()

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
            self.nested_under.clear()
            self.nested_under_tool.clear()
            self.nested_by.clear()
            self.lifted.clear()
        return refused


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
