"""The broker's waiting requests: each one (``_Waiting``): when it came, when its wait ends, the
GPUs nominated for it, with the leases it waits on (preemption) or whether it drains a group; and
the queue of them (``_Queue``), kept in the order the broker tries them, by deadline for its
timeouts, and by the time each is to be tried again though nothing else changed (``wake``), with a
count of those that drain. The first deadline and the first wake are at the top of their heaps,
where ``Broker.next_deadline`` reads them.

The queue is kept as requests come and go, not sorted and scanned at each call: until review R89
every ``Broker.submit`` sorted the whole queue, tried every request in it and scanned it for
timeouts, so queuing n requests that could not be placed took time quadratic in n (8,000 took
80 s, the broker's lock held). The draining requests are counted as they come, go and stop
draining, not at each try: until a regression review of R89 each request tried with draining on
(``max_draining`` above 0) counted them over the whole queue, and queuing n of them took time in n squared.
Until review R90 ``Broker.next_deadline`` read every waiting request for its deadline and waits:
a driver calling it after each call, as the docs' event loop does, was quadratic again.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field

from agentgate.dispatch.broker._model import GangRequest


@dataclass
class _Waiting:
    request: GangRequest
    submitted_at: float
    deadline: float
    seq: int
    nominated: tuple[int, ...] = ()
    victims: set[str] = field(default_factory=set)
    draining: bool = False
    """Whether ``nominated`` is a draining reservation; changed through ``_Queue.set_draining``
    while queued, which counts the requests that drain."""
    wake: float = -math.inf
    """When the broker tries it again though its state has not changed since it last did
    (``_Queue.woken``): ``-inf`` (at the next call) for one not tried yet, ``inf`` for one whose
    answer only a change of that state can change."""

    @property
    def rank(self) -> tuple[int, int]:
        """Its place in the order the broker tries waiting requests: by priority, then arrival
        (``seq``: ``restore`` numbers a snapshot's queue in its order), not ``submitted_at``, since
        a wall clock stepped back would put later requests first."""
        return (-self.request.priority, self.seq)


_Timed = tuple[float, int, str]
"""A heap entry: a time, then the ``seq`` and id of the request it is for (stale once that
request left the queue, or, for a wake, once its ``wake`` changed)."""


class _Queue(MutableMapping[str, _Waiting]):
    """Waiting requests by id, iterated in arrival order; ``ordered`` in the order the broker tries
    them. Each request added must have a ``seq`` above every one added before it (the broker
    numbers them as they come), which keeps each priority's requests in arrival order as they are
    added, with no sorting. Adding or removing a request costs about ``log(queue)`` (amortized:
    the heaps' stale entries are dropped now and then, ``_compact``)."""

    def __init__(self) -> None:
        self._by_id: dict[str, _Waiting] = {}
        self._by_priority: dict[int, dict[str, _Waiting]] = {}
        """Priority -> its requests, in arrival order."""
        self._priorities: list[int] = []
        """The priorities that have a request, as ``-priority`` in ascending order (highest first)."""
        self._deadlines: list[_Timed] = []
        self._wakes: list[_Timed] = []
        """The finite wakes (``_Waiting.wake``); those of ``-inf`` are ``_next_call``'s."""
        self._next_call: dict[str, _Waiting] = {}
        """The requests to try at the next call (``wake`` ``-inf``): not tried yet, or whose
        ``grant_check`` could not be read. Kept apart from ``_wakes`` so that the first wake ahead
        (``first_wake``) is at the top of that heap, not behind as many of them as there are."""
        self._draining = 0

    @property
    def draining(self) -> int:
        """How many queued requests drain (``_Waiting.draining``)."""
        return self._draining

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __contains__(self, key: object) -> bool:
        return key in self._by_id

    def __getitem__(self, key: str) -> _Waiting:
        return self._by_id[key]

    def __setitem__(self, key: str, w: _Waiting) -> None:
        """Queue ``w`` (``key`` is its id, not queued already)."""
        assert key == w.request.id and key not in self._by_id
        priority = w.request.priority
        self._by_id[key] = w
        same = self._by_priority.get(priority)
        if same is None:
            same = self._by_priority[priority] = {}
            bisect.insort(self._priorities, -priority)
        same[key] = w
        if w.draining:
            self._draining += 1
        if w.deadline != math.inf:
            heapq.heappush(self._deadlines, (w.deadline, w.seq, key))
        self._push_wake(w)
        self._compact()

    def __delitem__(self, key: str) -> None:
        w = self._by_id.pop(key)
        self._next_call.pop(key, None)
        if w.draining:
            self._draining -= 1
        priority = w.request.priority
        same = self._by_priority[priority]
        del same[key]
        if not same:
            del self._by_priority[priority]
            del self._priorities[bisect.bisect_left(self._priorities, -priority)]

    def ordered(self) -> list[_Waiting]:
        """Every request, in the order the broker tries them (``_Waiting.rank``)."""
        return [w for p in self._priorities for w in self._by_priority[-p].values()]

    def any_before(self, rank: tuple[int, int]) -> bool:
        """Whether a queued request comes before ``rank`` in the order the broker tries them (the
        first one does: the first of the highest priority's, in arrival order)."""
        if not self._priorities:
            return False
        first = next(iter(self._by_priority[-self._priorities[0]].values()))
        return first.rank < rank

    def after(self, rank: tuple[int, int]) -> list[_Waiting]:
        """The requests that come after ``rank`` in the order the broker tries them."""
        start = bisect.bisect_left(self._priorities, rank[0])
        found: list[_Waiting] = []
        for p in self._priorities[start:]:
            same = self._by_priority[-p].values()
            found += (w for w in same if w.seq > rank[1]) if p == rank[0] else same
        return found

    def timed_out(self, now: float) -> list[_Waiting]:
        """The requests whose deadline is ``now`` or before, in arrival order, for the caller to
        remove (none is returned twice)."""
        due: dict[str, _Waiting] = {}
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq, key = heapq.heappop(self._deadlines)
            w = self._by_id.get(key)
            if w is not None and w.seq == seq:
                due[key] = w
        return sorted(due.values(), key=lambda w: w.seq)

    def first_deadline(self) -> float:
        """The earliest ``deadline`` of a queued request, ``inf`` if none. About ``log(queue)``,
        amortized: the stale entries on top are dropped."""
        return self._first(self._deadlines, wake=False)

    def set_draining(self, w: _Waiting, draining: bool) -> None:
        """Mark ``w`` as draining or not, counted if it is queued (``draining``)."""
        if w.draining != draining and self._by_id.get(w.request.id) is w:
            self._draining += 1 if draining else -1
        w.draining = draining

    def set_wake(self, w: _Waiting, wake: float) -> None:
        """Try queued ``w`` again at ``wake`` though nothing else changes (``_Waiting.wake``)."""
        if wake != w.wake:
            self._next_call.pop(w.request.id, None)
            w.wake = wake
            self._push_wake(w)
            self._compact()

    def _push_wake(self, w: _Waiting) -> None:
        if w.wake == -math.inf:
            self._next_call[w.request.id] = w
        elif w.wake != math.inf:
            heapq.heappush(self._wakes, (w.wake, w.seq, w.request.id))

    def woken(self, now: float) -> list[_Waiting]:
        """The requests whose ``wake`` is ``now`` or before, in the order the broker tries them;
        each one's ``wake`` is then ``inf`` until it is set again."""
        found = self._next_call
        self._next_call = {}
        while self._wakes and self._wakes[0][0] <= now:
            wake, seq, key = heapq.heappop(self._wakes)
            w = self._by_id.get(key)
            if w is not None and w.seq == seq and w.wake == wake:
                found[key] = w
        for w in found.values():
            w.wake = math.inf
        return sorted(found.values(), key=lambda w: w.rank)

    def first_wake(self) -> float:
        """The earliest finite ``wake`` of a queued request, ``inf`` if none: the first time a
        request is to be tried again though nothing else changes, wakes at the next call aside.
        About ``log(queue)``, amortized: the stale entries on top are dropped."""
        return self._first(self._wakes, wake=True)

    def _first(self, heap: list[_Timed], wake: bool) -> float:
        """The time of ``heap``'s first entry that is not stale (``_Timed``; a ``wake`` entry is
        stale too once its request's ``wake`` changed), ``inf`` if none; the stale ones above it
        are popped."""
        while heap:
            time, seq, key = heap[0]
            w = self._by_id.get(key)
            if w is not None and w.seq == seq and (not wake or w.wake == time):
                return time
            heapq.heappop(heap)
        return math.inf

    def _compact(self) -> None:
        """Drop the stale entries of a heap once they are most of it, so that requests granted or
        withdrawn long before their deadline do not pile up there: amortized, a constant per
        entry pushed."""
        if len(self._deadlines) > 2 * len(self._by_id) + 64:
            self._deadlines = [
                (w.deadline, w.seq, key) for key, w in self._by_id.items() if w.deadline != math.inf
            ]
            heapq.heapify(self._deadlines)
        if len(self._wakes) > 2 * len(self._by_id) + 64:
            self._wakes = [(w.wake, w.seq, key) for key, w in self._by_id.items() if math.isfinite(w.wake)]
            heapq.heapify(self._wakes)
