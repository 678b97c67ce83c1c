"""Outcomes of calls that ran, waiting to be committed with their budget settlements
(``PendingOutcomes``), and how an ending exception settles a call."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

from agentgate.errors import AnswerTooLarge, BackendFailed, DispatchError, UsageUnreadable
from agentgate.gate._authorization import Authorization

PendingOutcome = tuple[Authorization, str, str | None, tuple[int, int] | None, bool, bool]
"""An outcome to commit: the allow, its status, the error, the usage to settle, whether an
attempt reached the call's function (a call that never started is left ``not_run``), and whether
the scheduler served it another call's result (``RESULT_REUSED``, its last reason)."""

PARK_AFTER_TICKS = 5
"""Ticks in a row with nothing pending (``linger_s / 2`` each: 50 ms by default) after which the
background thread waits to be woken instead of ticking."""
PARK_CHECK_S = 1.0
"""How often a parked thread looks whether its owner is still alive (it ends once it is not)."""

USAGE_UNREAD: tuple[int, int] = (-1, -1)
"""The usage settled (by identity) for a call that ran but whose ``spent``/``failed`` callback
raised: its outcome is an error charged as reserved."""


class PendingOutcomes:
    """Outcomes waiting to be committed, with their budget settlements.

    The next decision's transaction carries whatever is pending (``take``), so an agent that calls
    one tool after another pays one durable commit per call, not two, and never waits for a
    second writer's lock. What no decision picks up within ``linger_s`` a background thread
    commits on its own. ``take`` and ``flush`` are called holding the gate's store lock only.

    ``commit`` and ``tick`` are methods of the owner (the gate), held weakly: the thread never
    keeps a gate alive that its program dropped without ``close()`` (its threads and store
    connections would stay for the life of the process). While outcomes wait, the owner is
    held, so they are committed before it can go; once it has gone, the thread ends.

    An idle gate's thread sleeps: after ``PARK_AFTER_TICKS`` ticks in a row found nothing
    pending it waits until ``put`` (or ``restore``, ``close``) wakes it, looking once every
    ``PARK_CHECK_S`` whether the owner is still alive, instead of waking every ``linger_s / 2``
    for nothing (100 times a second, each time taking the GIL from whatever thread runs). While
    calls follow each other it never parks, so ``put`` wakes nobody then; the first outcome after
    an idle spell pays one wake-up. (No weak-reference callback wakes it: one runs inside the
    garbage collector, in whatever thread allocated, maybe this one while it holds the event's
    lock.)
    """

    def __init__(
        self,
        commit: Callable[[list[PendingOutcome]], None],
        tick: Callable[[], None],
        linger_s: float = 0.02,
    ) -> None:
        self._wake = threading.Event()  # ends a park: set by put/restore when parked, and by close
        self._commit = weakref.WeakMethod(commit)
        self._tick = weakref.WeakMethod(tick)
        self._held: Callable[[], None] | None = None  # ``tick``, bound, while outcomes wait
        self._linger_s = linger_s
        self._items: list[PendingOutcome] = []
        self._retry_at = 0.0  # time.monotonic() before which a failed background commit is not retried
        self._oldest = 0.0  # time.monotonic() when the oldest pending outcome was put
        self._parked = False  # the thread waits for ``_wake`` (nothing was pending for a while)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agentgate-outcomes", daemon=True)
        self._thread.start()

    def put(self, item: PendingOutcome) -> None:
        # No wake-up here unless the thread is parked: waking a thread per call costs more than
        # the call's own bookkeeping.
        with self._lock:
            if not self._items:
                self._oldest = time.monotonic()
                self._held = self._tick()
            self._items.append(item)
            parked, self._parked = self._parked, False
        if parked:
            self._wake.set()

    def take(self) -> list[PendingOutcome]:
        with self._lock:
            items, self._items = self._items, []
            self._held = None
        return items

    def restore(self, items: list[PendingOutcome], *, retry_after_s: float = 0.0) -> None:
        """Put back outcomes whose carrying transaction did not commit; the background thread
        tries them again after ``retry_after_s`` (a decision may carry them sooner)."""
        if items:
            with self._lock:
                self._items[:0] = items
                # They have waited already: the next tick commits them, or the one after the pause.
                self._oldest = 0.0
                self._retry_at = time.monotonic() + retry_after_s
                self._held = self._tick()
                parked, self._parked = self._parked, False
            if parked:
                self._wake.set()

    def flush(self) -> None:
        items = self.take()
        commit = self._commit()
        if items and commit is not None:  # the owner calls this: it is alive
            commit(items)

    def close(self) -> None:
        """Stop the background commits (the caller flushes what is left)."""
        self._closed.set()
        self._wake.set()
        self._thread.join()

    def _loop(self) -> None:
        # Every half ``linger_s``, have committed what has waited at least that long, so nothing
        # waits much more than ``linger_s``, and an outcome put just before a tick is left to the
        # next decision (an agent calling one tool after another otherwise paid an extra commit,
        # durable, under the store lock, about every ``linger_s``). ``tick`` commits under the
        # store lock, under which every ``take`` happens, so a reader that flushes first never
        # misses outcomes that another thread took but had not written yet.
        half = self._linger_s / 2
        idle = 0  # ticks in a row that found nothing pending
        while True:
            if idle >= PARK_AFTER_TICKS:
                with self._lock:
                    park = self._parked = not self._items
                if park:  # a ``put`` since then has set ``_wake``: the wait returns at once
                    if not self._wake.wait(PARK_CHECK_S):
                        if self._tick() is None:  # the owner was collected while idle
                            return
                        continue  # still idle: park again
                    self._wake.clear()
                idle = 0
            if self._closed.wait(half):
                return
            tick = self._tick()
            if tick is None:  # the owner was collected, with nothing left to commit
                return
            now = time.monotonic()
            if self._items and now - self._oldest >= half and now >= self._retry_at:
                tick()
            idle = 0 if self._items else idle + 1
            del tick  # not held while waiting


def _may_have(exc: BaseException, flag: str) -> bool:
    """``exc``'s ``flag`` (``DispatchError.sent``, ``BackendFailed.after_output``) read for its
    truth, or true when that cannot be read (a numpy array of several values, an attribute or a
    ``__bool__`` that raises): the call may have been sent, its output may have been delivered.
    Until review R91 that error replaced the call's own, whose outcome was never written and
    whose reservation stayed held (as a raising ``__eq__`` did until R89: ``_raised_by_fn``)."""
    try:
        return bool(getattr(exc, flag))
    except Exception:
        return True


def usage_after(auth: Authorization, exc: BaseException) -> tuple[int, int] | None:
    """The usage to settle a call that ``exc`` ended with: ``None`` (the reservation released)
    for an error, but a model call cancelled while it ran (``CancelledError``, a caller's
    timeout, ``KeyboardInterrupt``: not an ``Exception``) may have generated up to its limit
    already, so it is charged as reserved (``USAGE_UNREAD``), or repeated timeouts would be free
    generations. So is a model call whose answer was too large to read (``AnswerTooLarge``): the
    backend generated what the call asked for, as the gateway charges it (until review R57 it was
    released in process, each such call a free generation). So is one answered whole with a
    usage that is not token counts (``UsageUnreadable``: until review R68 released, each such
    call free), and a stream that broke after output (``BackendFailed.after_output``: until review R68 released
    under ``Gate.run`` of ``Gate.dispatch_stream``, the output delivered free); one whose
    ``after_output`` cannot be read for its truth is taken for one that broke after output
    (``_may_have``)."""
    if auth.call.resource.startswith("model:") and (
        not isinstance(exc, Exception)
        or isinstance(exc, AnswerTooLarge | UsageUnreadable)
        or (isinstance(exc, BackendFailed) and _may_have(exc, "after_output"))
    ):
        return USAGE_UNREAD
    return None


def never_sent(auth: Authorization, exc: BaseException) -> bool:
    """Whether ``exc`` ends a model call that its function says it never sent (a
    ``DispatchError`` with ``sent=False``: the gateway cut it while it was decided or waited in
    line for a backend, ``CallerGone`` or ``GatewayStopped``; gave it up in line, ``NoBackend``
    or ``Shed``; or an internal error stopped it before it was sent): it did not start, whatever
    ran before, so it is settled as one that did not (released; an approval it used pending
    again). Until review R90 such a call was settled as started, and the human approval it used
    was spent on a call no backend ever got (until review R90b one given up in line, answered
    429 ``shed`` or 503 ``no_backend``, or failed by the gateway before it was sent, still was).
    A ``sent`` whose truth cannot be read is taken for sent (``_may_have``)."""
    return (
        auth.call.resource.startswith("model:")
        and isinstance(exc, DispatchError)
        and not _may_have(exc, "sent")
    )


NOT_STARTED = frozenset({"SchedulingError", "Overloaded", "CircuitOpen"})
"""Errors with which the scheduler refuses a call before it starts (a closed gate, a full queue, an
open breaker; a non-idempotent call is never retried after an ambiguous failure, so an attempt
refused this way follows none that may have had an effect)."""
NOT_STARTED_DETAIL = "given up before the call started"
"""What an ``outcome`` entry says beside the exception of a call given up before it started."""
RESULT_REUSED = (
    "result reused: the tool did not run for this call; the scheduler gave it the result of a call "
    "with the same idempotency key, completed earlier or running beside it"
)
"""What the ``outcome`` entry of a tool call says when the scheduler served it another call's
result instead of running its tool (``Gate.run``'s attempt was never entered): a replay, decided
and charged as any call (docs/langgraph.md, Time travel). Until review R90 only its span said so
(``agentgate.task.reused``), and the log read as if the tool had run."""
MAX_ERROR_DETAIL = 200
"""How much of a backend failure's message (``NoBackend``, ``BackendFailed``) an ``outcome``
entry keeps beside its class."""
