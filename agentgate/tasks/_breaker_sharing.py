"""The circuit breakers that every scheduler of one ``SharedLimits`` shares (``_BreakerSharing``, a
part of ``SharedLimits``): one breaker per key, made on first use and bounded in number
(``PER_NAME_STATE``, then ``OVERFLOW_BREAKER``), and each transition told to every scheduler
attached and published to the store once. Breakers are thread-safe on their own and are looked
up without the limits' lock."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from agentgate._names import _unicode
from agentgate._shown import quoted
from agentgate.errors import InputError
from agentgate.store.leases import BREAKER_AHEAD_S
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState, CircuitBreaker
from agentgate.tasks._call import OVERFLOW_BREAKER, PER_NAME_STATE, ToolCall
from agentgate.tasks._config import SchedulerConfig

if TYPE_CHECKING:
    from agentgate.tasks._scheduler import Scheduler


class _BreakerSharing:
    """``SharedLimits``' breakers by key, the schedulers attached to these limits, and the
    transitions queued for the store (one writer per key at a time, so written in order)."""

    # The limits' state this part reads (``SharedLimits.__init__`` sets it).
    config: SchedulerConfig
    breakers: dict[str, CircuitBreaker]
    tool_breakers: dict[str, CircuitBreaker]
    opened_wall: dict[str, float]
    breaker_latest: dict[str, tuple[float, bool]]
    _listeners: weakref.WeakSet[Scheduler]
    _listeners_lock: threading.Lock
    _adopting: threading.local
    _to_publish: dict[str, tuple[str, float, int]]
    _made: dict[str, int]
    _written: dict[str, int]
    _unwritten: dict[str, tuple[str, float, int]]
    _publishing: set[str]
    _publish_lock: threading.Lock

    def breaker(self, key: str) -> CircuitBreaker:
        """The circuit breaker for ``key``, created closed; one per key for all schedulers (no lock needed).

        Raises ``InputError`` for a key that is not a string or not valid Unicode (a lone
        surrogate), as ``ToolCall`` refuses such a ``breaker_key``: the key is a metrics label and
        a store row. Until review R88 ``Scheduler.breaker(None)`` made a breaker keyed None, and
        every later scrape of the scheduler's registry raised ``TypeError``."""
        if not isinstance(key, str):  # before the lookup: a list would raise TypeError there
            raise InputError(f"a breaker key is a string, got {quoted(key)}")
        found = self.breakers.get(key)
        if found is None:
            if not key.isascii() and not _unicode(key):
                raise InputError(f"breaker key {quoted(key)} is not valid Unicode (a lone surrogate)")
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

    def detach(self, scheduler: Scheduler) -> None:
        """Tell ``scheduler`` (closed: ``aclose``) no more transitions: the schedulers still
        attached count them and publish them, each to the end of its own ``aclose``. Until review
        R93 a closed scheduler stayed attached, and when it came first it published another
        scheduler's transition on a pool it made anew and never shut down, which no ``aclose``
        waited for (its failure counted in the closed scheduler's metrics)."""
        with self._listeners_lock:
            self._listeners.discard(scheduler)

    def queue_publication(self, key: str, state: str, opened_at: float, generation: int) -> bool:
        """Make ``state`` (this process's transition ``generation`` of ``key``) the next one to
        write to the store, replacing one not written yet. True when no worker is writing ``key``
        now: the caller starts one (``next_publication`` until None, ``settle`` after each);
        else the worker writing it takes this one next."""
        with self._publish_lock:
            queued = self._to_publish.get(key)
            if queued is None or queued[2] < generation:  # a transition written again is older
                self._to_publish[key] = (state, opened_at, generation)
            if key in self._publishing:
                return False
            self._publishing.add(key)
            return True

    def next_publication(self, key: str) -> tuple[str, float, int] | None:
        """The transition of ``key`` to write next, or None: then the worker writing ``key`` is
        done, and the next ``queue_publication`` starts another."""
        with self._publish_lock:
            latest = self._to_publish.pop(key, None)
            if latest is None:
                self._publishing.discard(key)
            return latest

    def settle(self, key: str, generation: int) -> None:
        """This process's transitions of ``key`` up to ``generation`` are written to the store."""
        with self._publish_lock:
            if generation > self._written.get(key, 0):
                self._written[key] = generation
            failed = self._unwritten.get(key)
            if failed is not None and failed[2] <= generation:
                del self._unwritten[key]

    def unwritten(self, key: str, transition: tuple[str, float, int]) -> None:
        """``transition`` (state, opened_at, generation) of ``key`` was not written: the store
        failed, or no scheduler could publish it. It stays this process's latest word on ``key``
        (``own_transitions`` is None, so no older row is adopted over it) until a write of it, or
        of a later transition, succeeds; ``to_write_again`` hands it back for that."""
        with self._publish_lock:
            failed = self._unwritten.get(key)
            if transition[2] > self._written.get(key, 0) and (failed is None or failed[2] < transition[2]):
                self._unwritten[key] = transition

    def to_write_again(self, key: str) -> tuple[str, float, int] | None:
        """The latest transition of ``key`` whose write failed, or None."""
        with self._publish_lock:
            return self._unwritten.get(key)

    def own_transitions(self, key: str) -> int | None:
        """How many transitions of ``key`` this process has made, or None while one of them is
        not written to the store yet (waiting for a store worker, or its write failed). A row
        read while it is not None, when the count is the same after the read, is at least as new
        as every transition of this process."""
        with self._publish_lock:
            made = self._made.get(key, 0)
            return made if self._written.get(key, 0) >= made else None

    def made_none_since(self, key: str, own: int) -> bool:
        """Whether this process has made exactly ``own`` transitions of ``key`` (none since a read
        made with that count). Asked by an adoption with the breaker's lock held: every
        transition is counted under that lock too (``_breaker_changed`` runs inside it), so none
        comes between this answer and the adoption."""
        with self._publish_lock:
            return self._made.get(key, 0) == own

    def newer_than_known(self, key: str, order: tuple[float, bool], own: int) -> bool:
        """Whether a row of ``key`` read while this process had made ``own`` transitions of it,
        its transition ``order`` (wall time, whether to open), is newer than the latest this
        process knows (``breaker_latest``: ordered as the store orders writes); then it becomes
        the latest. A known one dated more than ``BREAKER_AHEAD_S`` ahead of this clock is older
        than any (written by a clock far off)."""
        with self._publish_lock:
            if self._made.get(key, 0) != own:
                return False  # a transition of this process was made meanwhile: read again
            known = self.breaker_latest.get(key)
            if known is not None and order <= known and known[0] <= time.time() + BREAKER_AHEAD_S:
                return False
            self.breaker_latest[key] = order
            return True

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
        with self._publish_lock:
            known = self.breaker_latest.get(key)
            if known is not None and opened_at <= known[0] <= opened_at + BREAKER_AHEAD_S:
                # Made after the transition this process knows (its own, or another host's whose
                # clock is ahead): dated after it, else the store took it for the older one.
                opened_at = math.nextafter(known[0], math.inf)
            generation = self._made[key] = self._made.get(key, 0) + 1
            self.breaker_latest[key] = (opened_at, new is BreakerState.OPEN)
        if new is BreakerState.OPEN:
            self.opened_wall[key] = opened_at
        for scheduler in listeners:
            if scheduler._publish_breaker(key, new, opened_at, generation):
                return
        # No scheduler could publish it now: the next one to check the key does.
        self.unwritten(key, ("open" if new is BreakerState.OPEN else "closed", opened_at, generation))
