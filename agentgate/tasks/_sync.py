"""The sync facade: ``SyncScheduler.submit(call, fn)`` for callers without an event loop.

Design (docs/tasks.md, "sync callers"). The tool function always runs in the *caller's* thread,
so a tool keeps its caller's thread-locals and context and no thread pool is needed.

Without a store (the gate's case) the caller's thread also runs the scheduling itself: the
admission state (in-flight counts, token buckets, the fair queue: a ``SharedLimits``, maybe shared
with other schedulers) is only ever touched under its one lock, by the callers' threads, by the
event loops of schedulers sharing it, and by its rate timer thread. A call that can start now
(nothing queued, every limit has room) starts without leaving its thread; one that cannot is
pushed into the same fair queue and its thread blocks on a one-shot signal that the dispatch sets
when a slot is given back: whoever gives a slot back (a caller's thread, an event loop, the rate
timer) dispatches under the lock and wakes the fairest waiting call's thread or task. Newcomers
never overtake: while anything is queued they queue too. Retries, the retry rule, breakers, dead
letters and metrics use the core's objects and step methods (``Scheduler._deadline``,
``_failed``, ``_record_dead``, ``_store_dead``); only the loop around them is written twice
(``Scheduler._run`` for coroutines, ``_attempts`` here for functions), step for step the same.

With a store (cross-process leases, shared rate buckets and breakers, persisted dead letters,
which are blocking store work inside the core's async attempt loop), every attempt is handed to
the loop thread and back instead (``_submit_handed``): the core decides, the caller's thread
runs the tool.

The loop thread is owned by this object and joined in ``close()``.

Limit: a sync function cannot be interrupted. Its timeout is not enforced while it runs: it keeps
its slot until it returns (so concurrency limits hold even then), a result that arrives late is
returned, a late failure is not retried past the deadline, and one of its transport
(``transient``, ``connection``) past its ``timeout_s`` is a ``timeout`` (as the async core's
attempt cut there is: ``Scheduler._failed``); a bad argument it reports late stays ``error``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import random
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from agentgate.errors import DeadlineExceeded, InputError, SchedulingError
from agentgate.store._base import Store
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
from agentgate.tasks._breaker import BreakerSnapshot
from agentgate.tasks._call import (
    Attempt,
    ToolCall,
    not_begun,
    require_flag,
    require_tool_call,
    require_tool_function,
)
from agentgate.tasks._classify import DEFAULT_CLASSIFIER, Classifier
from agentgate.tasks._config import PriorityClass, SchedulerConfig, ToolLimits
from agentgate.tasks._failures import (
    _circuit_open,
    _final_error,
    _give_up,
    _GiveUp,
    _started_late,
    _twin_late,
    _twin_out_of_time,
)
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._scheduler import Scheduler, _attempt_deadline, _drain_timeout, _rank
from agentgate.tasks._waiter import RUNNING, Waiter

T = TypeVar("T")


def _async_result(tool: str) -> InputError:
    """The error for a sync call whose function returned a body that never began (``not_begun``:
    a coroutine, a generator-based coroutine, an async generator). Until review R87b only a
    coroutine was caught: the others were the call's result, a once-only call recorded as run
    though its body never ran. Any other awaitable (a task, a future, a handle with
    ``__await__`` such as ``ray.ObjectRef``) is the call's result: the caller holds it (from
    review R87b to R87c it was refused, after the work was set going)."""
    return InputError(
        f"tool {tool}: a SyncScheduler called an async function, whose body never ran; "
        "submit it to a Scheduler (Gate.arun)"
    )


def _refuse_waiting_on_own_loop(shared: SharedLimits, call: ToolCall) -> None:
    """Raise ``SchedulingError`` when this thread runs an event loop on which calls of ``shared``
    are running or waiting: a sync call that waits for a slot here blocks that loop, so those
    calls, which may hold the slot or be given it first, never move on, and the wait never ends.
    A worker thread (``asyncio.to_thread``, a LangGraph tool pool) runs no loop: it waits."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop on this thread: whoever holds the slot gives it back meanwhile
    if shared.busy_on(loop):
        raise SchedulingError(
            f"tool {call.tool}: a sync call on the thread of a running event loop would wait for a slot "
            "that the loop's own calls hold or wait for, and block them forever; await Gate.arun "
            "(Scheduler.submit) there, or make the sync call from a worker thread (asyncio.to_thread)"
        )


_Work = tuple[Attempt, "asyncio.Future[Any]", Waiter | None]
#: The thread that runs Python signal handlers (the main thread never changes).
_MAIN_THREAD = threading.main_thread().ident
#: Longest single lock wait: ``Lock.acquire`` overflows on timeouts past the platform's time_t.
_LONGEST_WAIT_S = 86_400.0


class _Wake:
    """A one-shot signal a queued caller's thread blocks on until the dispatch starts its call.

    ``set_result`` and ``cancel`` are only called under the scheduler's lock (so at most once).
    """

    __slots__ = ("_lock", "_set", "cancelled")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False
        self.cancelled = False

    def done(self) -> bool:
        return self._set

    def set_result(self, result: None, /) -> None:
        if not self._set:
            self._set = True
            self._lock.release()

    def cancel(self) -> None:
        self.cancelled = True
        self.set_result(None)

    def wait(self, timeout: float | None) -> bool:
        """Block until set (True) or ``timeout`` seconds passed (False).

        A timeout longer than a lock can wait at once (a grant that expires in the year 9999) is
        waited in steps of ``_LONGEST_WAIT_S``."""
        if timeout is None:
            return self._lock.acquire()
        end = time.monotonic() + timeout
        while timeout > _LONGEST_WAIT_S:
            if self._lock.acquire(timeout=_LONGEST_WAIT_S):
                return True
            timeout = end - time.monotonic()
        return self._lock.acquire(timeout=max(timeout, 0.0))


class _HeldInterrupt:
    """Ctrl-C held back while the caller's thread changes the shared admission state, raised
    once the change is whole (``release``), where the call is given up as one interrupted while
    it waited or ran: no slot, rate token or queue entry is left behind, and no waiting call is
    woken without its slot counted. (Until review R66 a Ctrl-C could land between any two steps
    of ``SharedLimits.enqueue``, of the fair queue's ``push_entry``, or of the dispatch waking
    another call, and leave them half done: a slot taken that never came back, or given back
    twice, the in-flight count then below zero.)

    Only the main thread runs Python signal handlers, so only there is anything held; and only
    when SIGINT's handler is a Python function (the default one raises ``KeyboardInterrupt``):
    ``hold`` puts one in its place that notes the signal, ``release`` puts the handler back and
    calls it with what was noted. ``hold`` may raise (a signal that came before it took over),
    never after it returns; ``release`` raises what was held back. Both are no-ops when not
    needed (not held; another thread), so ``release`` may be called on every way out.

    Cost: two ``signal.signal`` calls (a ``sigaction`` each) per hold on the main thread, twice
    per attempt (its admission, its release) and once more at a keyed call's start and at its
    end (a call joined to a twin: at its end only when it leaves by an error); nothing on
    other threads, where sync tools run under LangGraph and in servers.
    """

    __slots__ = ("_before", "_caught")

    def __init__(self) -> None:
        self._before: Callable[[int, Any], Any] | None = None
        self._caught: tuple[int, Any] | None = None

    def hold(self) -> None:
        if self._before is not None or threading.get_ident() != _MAIN_THREAD:
            return
        before = signal.getsignal(signal.SIGINT)
        if not callable(before):  # SIG_DFL, SIG_IGN, or set outside Python: nothing is raised
            return
        self._caught = None  # one left by a release that a signal interrupted (it raised then)
        self._before = before
        signal.signal(signal.SIGINT, self._catch)

    def _catch(self, signum: int, frame: Any) -> None:
        self._caught = (signum, frame)

    def release(self) -> None:
        before = self._before
        if before is None:
            return
        self._before = None
        signal.signal(signal.SIGINT, before)  # a signal from here on goes to it
        caught = self._caught
        if caught is not None:
            self._caught = None
            before(*caught)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """A ``SyncScheduler``'s loop thread: run ``loop`` until it is stopped, then close it."""
    try:
        loop.run_forever()
    finally:
        loop.close()


def _stop(loop: asyncio.AbstractEventLoop) -> None:
    """Stop the loop thread of a ``SyncScheduler`` that was dropped without ``close``."""
    with contextlib.suppress(RuntimeError):  # closed meanwhile
        loop.call_soon_threadsafe(loop.stop)


def _wait_event(event: threading.Event, deadline: float | None) -> bool:
    """Wait until ``event`` is set (True) or the monotonic ``deadline`` passed (False; None: no
    deadline), in steps of at most ``_LONGEST_WAIT_S``."""
    while True:
        if deadline is None:
            step = _LONGEST_WAIT_S
        else:
            step = min(deadline - time.monotonic(), _LONGEST_WAIT_S)
            if step <= 0:
                return event.is_set()
        if event.wait(step):
            return True


def wait_until(condition: threading.Condition, settled: Callable[[], bool], deadline: float | None) -> bool:
    """Wait on ``condition``, which the caller holds, until ``settled()`` (True) or the monotonic
    ``deadline`` passed (False; None: no deadline), in steps of at most ``_LONGEST_WAIT_S``: a
    lock cannot wait past the platform's time_t at once (``Condition.wait_for(..., 1e10)``
    raises ``OverflowError``). ``SyncScheduler.close`` and ``Gate.close`` wait for the calls
    in progress with it."""
    while not settled():
        step = _LONGEST_WAIT_S if deadline is None else min(deadline - time.monotonic(), _LONGEST_WAIT_S)
        if step <= 0:
            return False
        condition.wait(step)
    return True


class _Twin:
    """The outcome of a running keyed call, for the calls with the same key that join it.

    Written under the scheduler's lock before ``finished`` (made by the first joiner) is set.
    ``priority`` and ``waiter`` are read and written under that lock too.
    """

    __slots__ = ("callers", "error", "finished", "interrupted", "out_of_time", "priority", "result", "waiter")

    def __init__(self, priority: PriorityClass) -> None:
        self.result: Any = None
        self.error: Exception | None = None
        #: ``error`` is the scheduler's ``DeadlineExceeded`` for the call's own deadline, not its
        #: tool's outcome (``_GiveUp.at_deadline``).
        self.out_of_time = False
        self.interrupted = False
        self.finished: threading.Event | None = None
        #: The classes of the running call and of the calls joined to it still waiting, in the
        #: order they came (a joiner that stops waiting takes its class out).
        self.callers = [priority]
        #: The most urgent class among the running call and the calls joined to it: its attempts
        #: queue at that class.
        self.priority = priority
        #: Its latest attempt's waiter that was queued (a more urgent joiner moves it up while it
        #: waits: ``SharedLimits.hasten``), else None.
        self.waiter: Waiter | None = None


class SyncScheduler:
    """A ``Scheduler`` for threads. Same arguments as ``Scheduler`` (``limits``: shared with other
    schedulers, see ``SharedLimits``); use as a context manager or ``close()``."""

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
        self.scheduler = Scheduler(
            config,
            store=store,
            dead_letters=dead_letters,
            rng=rng,
            classifier=classifier,
            registry=registry,
            limits=limits,
        )
        self.scheduler._preemptive = False
        self._loop = asyncio.new_event_loop()
        self._direct = store is None
        #: The (maybe shared) limits' lock: guards the admission state, the result cache and the
        #: fields below (direct mode).
        self._lock = self.scheduler.shared.lock
        self._idle = threading.Condition(self._lock)
        self._active = 0  # calls inside submit (direct mode)
        self._inside = threading.local()  # ``depth``: this scheduler's calls running in a thread
        self._waiting: set[_Wake] = set()  # queued callers' signals, cancelled by close()
        self._twins: dict[str, _Twin] = {}
        self._closing = threading.Event()  # wakes callers sleeping a retry backoff
        self._thread = threading.Thread(
            target=_serve, args=(self._loop,), name="agentgate-scheduler", daemon=True
        )
        self._thread.start()
        # Compared with get_ident() (cheaper than current_thread()), and only while the loop thread
        # lives: CPython gives an ended thread's ident to a thread started later, which until
        # review R90 was refused as the scheduler's own (after ``close``, or the loop thread's end).
        self._thread_id = self._thread.ident
        # A scheduler dropped without ``close`` stops its loop thread (which holds the loop, not
        # the scheduler): one thread and the loop's three descriptors were left per scheduler.
        self._finalizer = weakref.finalize(self, _stop, self._loop)
        self._finalizer.atexit = False  # type: ignore[misc]  # a documented attribute the stubs miss
        self._closed = False
        # Held through ``close``: a second one (another thread) returns once the scheduler is
        # closed, not while the first still drains; re-entrant: a signal handler closing the
        # scheduler in the thread that closes it must not wait for itself. ``_shut``: closed to
        # the end; until then a ``close`` interrupted (a Ctrl-C) is finished by the next one,
        # which waits for the loop's close steps already begun (``_aclosing``,
        # ``_executor_shut``) instead of starting them again.
        self._close_lock = threading.RLock()
        self._shut = False
        self._aclosing: concurrent.futures.Future[None] | None = None
        self._executor_shut: concurrent.futures.Future[None] | None = None

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry holding the scheduler's metrics."""
        return self.scheduler.registry

    def submit(self, call: ToolCall, fn: Callable[[Attempt], T]) -> T:
        """Run ``fn`` in this thread for ``call`` under the scheduler's limits; return its result.

        Blocks until the call is done. Raises what ``Scheduler.submit`` raises, and
        ``SchedulingError`` when the scheduler is closed or shuts down under the call, and
        ``InputError`` for a ``call`` that is not a ``ToolCall`` or an ``fn`` that is not callable.
        """
        require_tool_call(call)
        require_tool_function(fn)
        if threading.get_ident() == self._thread_id and self._thread.is_alive():
            raise SchedulingError("SyncScheduler.submit must not be called from the scheduler's own thread")
        if self._closed:
            raise SchedulingError("the scheduler is closed")
        # This thread runs a call of this scheduler until it returns: a ``close`` from it (its
        # tool's code) could never drain that call (review R81: it waited for ever). Set inside
        # the ``try`` and restored by value, so no Ctrl-C leaves it set.
        inside = self._inside
        depth = getattr(inside, "depth", 0)
        try:
            inside.depth = depth + 1
            if not self._direct:
                if RUNNING.get() is None:  # a nested call may borrow its ancestor's slot: not refused
                    self._refuse_handed_wait_on_own_loop(call)
                return self._submit_handed(call, fn)
            core = self.scheduler
            limits = core._limits_cache.get(call.tool) or core.shared.tool_limits(call.tool)
            priority = core._priorities.get(call.priority)
            if priority is None:
                priority = core._priorities[call.priority] = core.config.priority_class(call.priority)
            key = call.idempotency_key() if call.run_id and call.call_id else None
            active = False  # counted in ``_active``: set with it, no signal lands between the two
            try:
                with self._lock:
                    if core._closed:
                        raise SchedulingError("the scheduler is closed")
                    self._active += 1
                    active = True
                if key is None:
                    return self._attempts(call, fn, limits, priority, None)
                return self._keyed(call, fn, limits, priority, key)
            finally:
                # Until review R66 a Ctrl-C after the count and before the ``try`` left it counted
                # for good, and ``close()`` then waited for the call for ever.
                if active:
                    with self._lock:
                        self._active -= 1
                        if not self._active and core._closed:
                            self._idle.notify_all()
        finally:
            inside.depth = depth

    # --- direct mode: scheduling in the caller's thread -------------------------------------------

    def _keyed(
        self,
        call: ToolCall,
        fn: Callable[[Attempt], T],
        limits: ToolLimits,
        priority: PriorityClass,
        key: str,
    ) -> T:
        """A call with an idempotency key: reuse a completed result, join a running twin, or run."""
        core = self.scheduler
        results = core._results
        mine: _Twin | None = None  # set with its entry in ``_twins``: no signal lands between the two
        twin: _Twin | None = None  # the running twin this call joined, its class among its callers
        interrupts = _HeldInterrupt()  # made here: a Ctrl-C may land as a function begins
        try:
            # Held while the call registers (its own twin, or its class among a twin's callers):
            # a Ctrl-C lands after, where the ``except`` below takes the registration back.
            interrupts.hold()
            try:
                with self._lock:
                    if call.reuse_result and key in results:
                        results.move_to_end(key)
                        core.metrics.event("reused", call.tool, {"agentgate.joined": False})
                        return results[key]  # type: ignore[no-any-return]
                    running = self._twins.get(key)
                    if running is None:
                        mine = self._twins[key] = _Twin(priority)
                    else:
                        core.metrics.event("reused", call.tool, {"agentgate.joined": True})
                        running.callers.append(priority)
                        twin = running
                        if priority.rank < twin.priority.rank:
                            # This call waits for the twin: the twin waits for a slot at this call's class.
                            twin.priority = priority
                            if twin.waiter is not None:
                                core.shared.hasten(twin.waiter, priority)
                        if twin.finished is None:
                            twin.finished = threading.Event()
                        joined = twin.finished
            finally:
                interrupts.release()
            if twin is not None:
                return self._joined(call, twin, joined)  # type: ignore[no-any-return]
            result = self._attempts(call, fn, limits, priority, key, mine)
        except BaseException as exc:
            if mine is not None:  # until review R66 a Ctrl-C before the ``try`` left it for good
                try:
                    interrupts.hold()
                finally:
                    self._twin_ended(key, mine, None, exc, False, interrupts)
            elif twin is not None:
                # Until review R67 a Ctrl-C after the join and before the wait left this call's
                # class among the twin's callers (the twin waited at it for nobody).
                try:
                    interrupts.hold()
                finally:
                    self._left_twin(key, twin, priority, interrupts)
            raise
        assert mine is not None  # no twin joined: this call ran
        try:
            interrupts.hold()
        finally:
            self._twin_ended(key, mine, result, None, call.reuse_result, interrupts)
        return result

    def forget_result(self, call: ToolCall, result: object) -> None:
        """``Scheduler.forget_result`` from the caller's thread: under the lock that guards the
        result cache (direct mode), else on the loop that keeps it, queued before any later call
        this thread makes."""
        if self._direct:
            with self._lock:
                self.scheduler.forget_result(call, result)
        else:
            with contextlib.suppress(RuntimeError):  # a closed loop serves no later call
                self._loop.call_soon_threadsafe(self.scheduler.forget_result, call, result)

    def _joined(self, call: ToolCall, twin: _Twin, joined: threading.Event) -> Any:
        """Wait for the running ``twin`` of ``call`` and take its outcome (on every way out by an
        error the caller, ``_keyed``, takes the call's class out of the twin's callers)."""
        core = self.scheduler
        deadline = None
        if call.deadline is not None or call.grant_expires_at is not None:
            deadline = core._deadline(call, time.monotonic())
        if not _wait_event(joined, deadline):
            raise _twin_late(call)
        if twin.out_of_time:
            assert twin.error is not None
            # The twin's deadline, this call's only when its own has passed too.
            if deadline is not None and time.monotonic() >= deadline:
                raise _twin_late(call) from twin.error
            raise _twin_out_of_time(call, twin.error) from twin.error
        if twin.error is not None:
            raise twin.error
        if twin.interrupted:
            raise SchedulingError(f"tool {call.tool}: the running twin of this call was interrupted")
        return twin.result

    def _twin_ended(
        self,
        key: str,
        mine: _Twin,
        result: Any,
        exc: BaseException | None,
        reuse: bool,
        interrupts: _HeldInterrupt,
    ) -> None:
        """The keyed call of ``mine`` ended (``exc``: how it failed, else it returned ``result``,
        kept in the result cache when ``reuse``): out of ``_twins``, its outcome kept for the
        calls joined to it, which are woken (a
        Ctrl-C held back meanwhile: until review R66 one landing before the wake-up left them
        waiting until their deadlines). Called with ``interrupts`` held (entered from a ``finally``
        after ``hold``, so that no Ctrl-C lands as it begins), which it releases at its end."""
        core = self.scheduler
        with self._lock:
            del self._twins[key]
            if exc is None:
                mine.result = result
                if core.config.result_cache_size and reuse:
                    results = core._results
                    results[key] = result
                    if len(results) > core.config.result_cache_size:
                        results.popitem(last=False)
            elif isinstance(exc, Exception):
                mine.error = exc
            else:
                mine.interrupted = True
            done = mine.finished
        if done is not None:
            done.set()
        interrupts.release()

    def _left_twin(self, key: str, twin: _Twin, priority: PriorityClass, interrupts: _HeldInterrupt) -> None:
        """A call of class ``priority`` joined to ``twin`` stopped waiting for it: while ``twin``
        still runs, its attempts queue at the most urgent class among the callers still waiting
        (the first of them that came, among classes of one rank), and its waiting attempt moves
        back to it (``SharedLimits.slow``). Called with ``interrupts`` held (as ``_twin_ended``),
        which it releases at its end."""
        with self._lock:
            if self._twins.get(key) is twin:  # else it has ended meanwhile
                twin.callers.remove(priority)
                urgent = min(twin.callers, key=_rank)
                if urgent != twin.priority:
                    twin.priority = urgent
                    if twin.waiter is not None:
                        self.scheduler.shared.slow(twin.waiter, urgent)
        interrupts.release()

    def _attempts(
        self,
        call: ToolCall,
        fn: Callable[[Attempt], T],
        limits: ToolLimits,
        priority: PriorityClass,
        key: str | None,
        twin: _Twin | None = None,
    ) -> T:
        """The attempts of one call: ``Scheduler._run`` step for step (its step helpers), with ``fn``
        called in this thread. ``twin``: the record of a keyed call, which the calls joined to it
        read (and whose class its attempts queue at)."""
        core = self.scheduler
        shared = core.shared
        lock = self._lock
        metrics = core.metrics
        clock = time.monotonic
        tool = call.tool
        deadline = None
        if call.deadline is not None or call.grant_expires_at is not None:
            deadline = core._deadline(call, clock())
        breaker = shared.breaker_for(call)
        context = otel_context.get_current()
        traced = bool(context) and trace.get_current_span(context).is_recording()
        errors: list[AttemptError] = []
        failed: Exception | None = None  # the last failed attempt's error
        number = 0
        interrupts = _HeldInterrupt()  # held while a slot is taken or given back
        while True:
            number += 1
            try:
                # 1. admission: start now, or wait in the fair queue (never past the deadline)
                if not breaker.closed and (refused := breaker.refusal()) is not None:
                    raise _circuit_open(breaker, tool, refused)
                interrupts.hold()  # released (raising a Ctrl-C held back) once the slot is in hand
                try:
                    waiter = self._admit(call, limits, priority, deadline, traced, interrupts, twin)
                except BaseException:
                    interrupts.release()
                    raise
                # 2. the attempt, under the breaker and the attempt deadline (checked, not enforced)
                # held: the period of a half-open probe (0: none); probing: held, fn not started
                held = probing = 0
                attempted = False  # whether the attempt began: else its rate token goes back
                try:
                    if not breaker.closed:
                        admitted = shared.admission(breaker)
                        if isinstance(admitted, BreakerSnapshot):
                            raise _circuit_open(breaker, tool, admitted)
                        held = probing = admitted
                    interrupts.release()  # the slot (and a probe) is given back below
                    unix_deadline = None
                    if deadline is not None or limits.timeout_s is not None:
                        now = clock()
                        if deadline is not None and deadline <= now:
                            raise _started_late(tool, waiter)  # its token goes back below
                        unix_deadline = _attempt_deadline(limits, deadline, now)[1]
                    if traced:  # counted under the metrics' own lock
                        metrics.event("started", tool, {"agentgate.attempt": number})
                    else:
                        metrics.tally("started", tool)
                    attempt = tuple.__new__(Attempt, (call, number, key, unix_deadline))
                    attempted = True
                    probing = 0  # from here on the outcome is reported to the breaker below
                    # Calls the tool makes are nested in this one. Marked inside the ``try`` and
                    # restored by value: a Ctrl-C as ``set`` returns (signals are checked there)
                    # cannot leave the mark behind (until review R70 ``token = RUNNING.set(...)``
                    # stood before the ``try``, and later calls of the thread ran as nested ones).
                    parent = RUNNING.get()
                    try:
                        RUNNING.set(waiter)
                        result = fn(attempt)
                        # Asked inside the ``try``: a result whose check raises (a lazy proxy
                        # outside its context) is a failed attempt, as in the async core (until
                        # review R90 it escaped from the ``else`` below with the half-open probe
                        # kept, and the breaker refused every later call).
                        unbegun = not_begun(result)
                    finally:
                        RUNNING.set(parent)
                except _GiveUp:
                    raise
                except Exception as exc:
                    # 3. a failed attempt: classify, tell the breaker, ask the retry rule. Its
                    # probe is told or given back there, not again by the ``finally`` (review R82,
                    # as in the async core).
                    probing = 0
                    failed = exc
                    ended = clock()
                    # Past its timeout_s, which a sync tool cannot be cut at: a transport failure
                    # is a timeout, as the async core's cut attempt is (``_failed``). ``now``: its start.
                    late = False
                    if attempted and limits.timeout_s is not None:
                        late = ended - now >= limits.timeout_s
                    delay = core._failed(
                        call, limits, key, exc, number, errors, breaker, deadline, ended, held, overran=late
                    )
                except BaseException:
                    if held and not probing:  # interrupted while the tool ran: says nothing of the tool
                        breaker.release(held)
                    raise
                else:
                    if unbegun:  # an async function: none of its body ran
                        if held:
                            breaker.release(held)  # says nothing of the tool
                        raise _async_result(tool)
                    if not breaker.healthy:
                        breaker.record_success(period=held)
                    return result
                finally:
                    try:
                        interrupts.hold()  # no Ctrl-C lands in the dispatch that ``finish`` runs
                    finally:
                        if probing:
                            breaker.release(held)
                        with lock:
                            if not attempted:  # refused before its attempt: its token goes back
                                shared.unused(waiter)
                            shared.finish(waiter)  # starts the fairest waiting call, of any scheduler
                        interrupts.release()
                # 4. back off with every slot released (close() cuts it short), then try again
                _wait_event(self._closing, time.monotonic() + delay)  # a long backoff in steps
            except _GiveUp as stop:
                given_up = stop
                break
        if errors:
            with lock:
                letter = core._record_dead(call, key, errors, given_up.reason)
            if core._dead_store is not None:
                core._store_dead(letter)
        if given_up.at_deadline and twin is not None:
            with lock:
                twin.out_of_time = True  # its joiners are told the deadline was not theirs
        # Out of the handler, as the async core raises it (``_final_error``).
        raise _final_error(given_up.error, failed, errors)

    def _admit(
        self,
        call: ToolCall,
        limits: ToolLimits,
        priority: PriorityClass,
        deadline: float | None,
        traced: bool,
        interrupts: _HeldInterrupt,
        twin: _Twin | None = None,
    ) -> Waiter:
        """Take the call's slots now, or wait for them in the fair queue (a keyed call's ``twin``
        given: at its class, and where a more urgent joiner finds it); raises ``_GiveUp``.

        Called with ``interrupts`` held; returns with them held (the caller releases them where
        the slot is given back on every way out), released only while the call waits."""
        core = self.scheduler
        shared = core.shared
        lock = self._lock
        clock = time.monotonic
        try:
            with lock:
                if core._closed:
                    raise SchedulingError("the scheduler is closed")
                if deadline is not None and deadline <= clock():
                    raise DeadlineExceeded(
                        f"tool {call.tool}: the call's deadline passed before it could start", tool=call.tool
                    )
                parent = RUNNING.get()  # the attempt whose tool made this call, if any
                waiter = shared.start_now(call, limits, parent)
                if waiter is not None:
                    if twin is not None:  # found by a joiner all the same (review R68)
                        waiter.urgency = twin.priority
                        twin.waiter = waiter
                    core.metrics.observe_wait(0.0)
                    return waiter
                _refuse_waiting_on_own_loop(shared, call)
                wake = _Wake()
                if twin is not None:
                    priority = twin.priority
                waiter = shared.enqueue(call, limits, priority, traced, wake, core.metrics, parent=parent)
                try:
                    if twin is not None:
                        twin.waiter = waiter
                    if waiter.granted:
                        core.metrics.observe_wait(clock() - waiter.queued_at)
                        return waiter
                    self._waiting.add(wake)
                except BaseException:
                    # Ctrl-C before the wait below: given up as there (until review R65b it
                    # escaped with the call queued, which later took the slot, never to run).
                    shared.abandon(waiter)
                    raise
            try:
                interrupts.release()  # a Ctrl-C held back while it was queued lands here
                woke = wake.wait(None if deadline is None else deadline - clock())
                interrupts.hold()
            except BaseException:
                try:
                    interrupts.hold()
                finally:
                    with lock:
                        self._waiting.discard(wake)
                        shared.abandon(waiter)
                    interrupts.release()
                raise
            with lock:
                self._waiting.discard(wake)
                if woke and not wake.cancelled:
                    core.metrics.observe_wait(clock() - waiter.queued_at)
                    return waiter
                holding = shared.holding_back(waiter)  # named in the error, read before it leaves
                shared.abandon(waiter)  # out of the queue, or (granted at the last moment) its slot back
            if wake.cancelled:
                raise SchedulingError("the scheduler shut down before the call could start")
            waited = clock() - waiter.queued_at
            raise DeadlineExceeded(
                f"tool {call.tool}: could not start before the call's deadline (queued {waited:.3f}s "
                f"waiting for {holding})",
                tool=call.tool,
                waited_s=waited,
            )
        except SchedulingError as exc:
            raise _give_up(exc) from exc

    # --- with a store: every attempt handed to the loop thread and back ---------------------------

    def _refuse_handed_wait_on_own_loop(self, call: ToolCall) -> None:
        """With a store: ``_refuse_waiting_on_own_loop`` when ``call`` could not start now in this
        process (the core admits it on the loop thread, while this thread only waits for the
        hand-off, so the question is asked here first)."""
        shared = self.scheduler.shared
        limits = self.scheduler._limits_cache.get(call.tool) or shared.tool_limits(call.tool)
        with self._lock:
            # Asked without taking the rate token, which the core's admission takes. (Until
            # review R54 it was taken and kept: every call took two, and a burst of 3 started
            # one call; until R67 taken and given back, and a Ctrl-C between the two lost it.)
            must_wait = bool(shared.queue.size) or not shared.has_room(call, limits, take=False)
        if must_wait:
            _refuse_waiting_on_own_loop(shared, call)

    def _submit_handed(self, call: ToolCall, fn: Callable[[Attempt], T]) -> T:
        loop = self._loop
        inbox: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        caller_context = otel_context.get_current()

        given_up = False  # the caller left (Ctrl-C) while it waited: no attempt is handed to it
        handing = threading.Lock()  # orders handing an attempt against giving up

        async def hand_to_caller(attempt: Attempt) -> T:
            done: asyncio.Future[T] = loop.create_future()
            with handing:
                if given_up:  # granted as the caller left: it never begins, and its slot goes back
                    raise asyncio.CancelledError
                inbox.put((attempt, done, RUNNING.get()))  # the core's attempt, for nested calls
            return await done

        def stop_waiting() -> None:
            """Ctrl-C here: the call is given up. An attempt handed over and not begun (its slot
            granted as the interrupt came) is cancelled, so that its slot goes back; none is
            handed from now on."""
            nonlocal given_up
            with handing:
                given_up = True
                stranded = []
                with contextlib.suppress(queue.Empty):
                    while True:
                        stranded.append(inbox.get_nowait())
            for work in stranded:
                if work is not None:
                    with contextlib.suppress(RuntimeError):  # a closed loop cancelled it already
                        loop.call_soon_threadsafe(work[1].cancel)
            if outcome is not None:  # None: the interrupt came as the call was being queued
                outcome.cancel()

        async def in_caller_context() -> tuple[T | None, BaseException | None]:
            # The call's error is returned, not raised: the future of run_coroutine_threadsafe
            # turns a concurrent.futures.CancelledError raised in the loop into asyncio's, a
            # BaseException, so a tool's own (a cancelled executor future's result()) reached
            # its caller as asyncio.CancelledError, past every ``except Exception``. So is an
            # interrupt that the call's own code run on this loop raised (its classifier, its
            # ``pauses`` predicate, the rng: ``KeyboardInterrupt``, ``SystemExit``), for its
            # caller's thread to raise, as without a store: until review R90 it ended the loop
            # thread, and the caller waited for good.
            # An error is handed back once the store work the call left running on its way out
            # has landed (the core submits it and does not wait: a half-open probe's claim given
            # back, ``_end_probe``), so that a call its caller makes next finds that claim free.
            # An interrupted or paused probe leaves the breaker half open: until review R90b a
            # call made right after it could find the claim still held, and was refused with
            # ``CircuitOpen`` ("its probe(s) run") though no probe ran.
            token = otel_context.attach(caller_context)
            core = self.scheduler
            running = core._background.copy()  # its jobs end in the store pool's threads
            try:
                return await core.submit(call, hand_to_caller), None
            except asyncio.CancelledError:
                raise  # the call cancelled (``stop_waiting``, a close): told by ``outcome``
            except BaseException as exc:
                # each job runs to its end; a failure is counted
                await core._landed(core._background - running)
                return None, exc
            finally:
                otel_context.detach(token)

        outcome: concurrent.futures.Future[tuple[T | None, BaseException | None]] | None = None
        returned: list[T] = []  # what an attempt returned (no attempt follows it)
        try:
            outcome = asyncio.run_coroutine_threadsafe(in_caller_context(), loop)
            outcome.add_done_callback(lambda _: inbox.put(None))
        except RuntimeError as exc:  # the loop was closed between the check and here
            raise SchedulingError("the scheduler is closed") from exc
        except BaseException:
            # Ctrl-C as the call is queued, before the wait below: given up as there (until review
            # R65b it escaped here with the call queued, which later took the slot and its lease
            # and handed its attempt to nobody, holding both while the process lived).
            stop_waiting()
            raise
        while True:
            try:
                work = inbox.get()
            except BaseException:  # Ctrl-C while waiting: the call is given up, its slot not taken
                stop_waiting()
                raise
            if work is None:
                try:
                    result, error = outcome.result()
                except concurrent.futures.CancelledError as exc:
                    if returned:  # shut down while the tool ran to its end here: as in direct mode
                        return returned[0]
                    raise SchedulingError("the scheduler shut down before the call finished") from exc
                if error is not None:
                    raise error
                return result  # type: ignore[return-value]  # T (None only beside an error)
            attempt, done, running = work
            parent = RUNNING.get()
            try:
                RUNNING.set(running)  # inside the ``try``, restored by value: as in ``_attempts``
                value = fn(attempt)
                # Asked inside the ``try``, as in ``_attempts``: an error checking the result is
                # the attempt's (until review R90 it escaped from the ``else``, the handed attempt
                # neither settled nor cancelled: it held its slot and lease for good).
                unbegun = not_begun(value)
            except Exception as exc:
                self._settle(done, None, exc)
            except BaseException:
                outcome.cancel()
                raise
            else:
                if unbegun:  # an async function: none of its body ran
                    outcome.cancel()
                    raise _async_result(call.tool)
                returned.append(value)
                self._settle(done, value, None)
            finally:
                RUNNING.set(parent)

    def _settle(self, done: asyncio.Future[Any], value: Any, error: Exception | None) -> None:
        def settle() -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(value)

        with contextlib.suppress(RuntimeError):  # a closed loop: shutdown already cancelled the call
            self._loop.call_soon_threadsafe(settle)

    # --- state and shutdown -----------------------------------------------------------------------

    def breakers(self) -> list[BreakerSnapshot]:
        """The state of every breaker the scheduler has used."""
        return self.scheduler.breakers()

    def dead_letters(self) -> list[DeadLetter]:
        """Dead letters recorded by the scheduler, oldest first."""
        with self._lock:
            return self.scheduler.dead_letters()

    def close(self, *, drain: bool = True, timeout_s: float | None = None) -> None:
        """Drain (or cancel) the calls in progress, stop the loop thread and join it. Idempotent.

        Draining lets running and queued calls finish (at most ``timeout_s``, None: no limit);
        retries not yet started give up (``SchedulingError``). Then, or at once when not
        draining, queued calls are refused with ``SchedulingError``. A sync tool already running
        cannot be interrupted: it finishes in its caller's thread and its result is returned.
        ``timeout_s`` as in ``Scheduler.aclose`` (not a number, or NaN: ``InputError``, and nothing
        is closed); so is a ``drain`` that is not True or False. A second ``close`` (another thread's) returns once the first has closed the
        scheduler; after a ``close`` interrupted (a Ctrl-C), the next one finishes the job, a drain
        already begun on the loop going on unless it is called with ``drain=False`` (until review
        R74 both returned at once, the loop thread left running). Two closes that cannot wait for
        each other do not: one re-entered in the thread closing (a signal handler) closes the
        scheduler itself (the first then returns), and one from a running tool's thread while
        another close is in progress returns at once (that close may be draining this very call).
        From the scheduler's own thread it raises ``SchedulingError``: the close waits for work of
        that thread.
        """
        timeout_s = _drain_timeout(timeout_s)
        require_flag(drain, "close's drain")
        if threading.get_ident() == self._thread_id and self._thread.is_alive():
            raise SchedulingError("SyncScheduler.close must not be called from the scheduler's own thread")
        if not self._close_lock.acquire(blocking=RUNNING.get() is None):
            return  # a tool's thread: the close in progress may wait for this very call
        if drain and not self._shut and getattr(self._inside, "depth", 0) > 0:
            self._close_lock.release()
            raise SchedulingError(
                "SyncScheduler.close from a call it is running would wait for that call for ever: "
                "close it once the call has returned (or with drain=False)"
            )
        try:
            if self._shut:
                return
            self._closed = True
            self._finalizer.detach()
            if self._direct:
                self._drain_callers(drain, timeout_s)
            aclosing = self._aclosing
            if aclosing is None or (not drain and not aclosing.done()):
                if aclosing is not None:
                    aclosing.cancel()  # an interrupted close's drain: this close does not drain
                aclosing = self._aclosing = asyncio.run_coroutine_threadsafe(
                    self.scheduler.aclose(drain=drain, timeout_s=timeout_s), self._loop
                )
            try:
                aclosing.result()
            except concurrent.futures.CancelledError:
                if self._shut:  # a close re-entered here with drain=False cancelled this drain
                    return  # and closed the scheduler (until review R76 this raised)
                raise
            # On the scheduler's own loop thread: the caller's thread may be running an event loop
            # of its own (an async app's shutdown handler), where run_until_complete would refuse.
            if self._executor_shut is None:
                self._executor_shut = asyncio.run_coroutine_threadsafe(
                    self._loop.shutdown_default_executor(), self._loop
                )
            self._executor_shut.result()
            _stop(self._loop)  # closed already when an interrupted close got past this
            self._thread.join()
            self._loop.close()
            self._shut = True
        finally:
            self._close_lock.release()

    def _drain_callers(self, drain: bool, timeout_s: float | None) -> None:
        """``close``'s part in direct mode: refuse new calls and retries, wait for the calls in
        progress (``drain``, at most ``timeout_s``), then refuse the queued ones."""
        with self._lock:
            self.scheduler._closed = True
        self._closing.set()
        with self._lock:
            if drain:
                end = None if timeout_s is None else time.monotonic() + timeout_s
                wait_until(self._idle, lambda: not self._active, end)
            for wake in self._waiting:
                wake.cancel()

    def __enter__(self) -> SyncScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
