"""What the scheduler shows: OpenTelemetry span events and Prometheus metrics.

Span events go on the caller's current span (the ``execute_tool`` span of the integration), named
``agentgate.task.<event>``: queued, started, retried, gave_up, shed, reused, breaker_opened,
breaker_half_open, breaker_closed; the names an event carries (``agentgate.tool``,
``agentgate.tenant``) are cut to ``MAX_NAME_CHARS`` (200) characters. Nothing is recorded when no
span is recording, so the cost without tracing is one context lookup.

Prometheus metrics live in a per-scheduler ``CollectorRegistry``, or in one the caller passes, which
several schedulers may share (each family is exported once: events and waits summed over the
schedulers, queue depth and in-flight summed over the distinct admission states, a breaker key's
worst state; the counts of a scheduler that is gone stay in the sums). Gauges are read from the
schedulers' own counters when scraped, so the hot path only bumps integers:

- ``agentgate_tasks_queue_depth{tenant}``: calls waiting.
- ``agentgate_tasks_in_flight{tool}``: attempts running.
- ``agentgate_tasks_events_total{event,tool}``: every scheduling event (retries are ``retried``).
- ``agentgate_tasks_breaker_state{key}``: 0 closed, 1 half open, 2 open.
- ``agentgate_tasks_wait_seconds``: time each attempt waited for its slots, histogram.

Label values are bounded in number: a family exports at most ``MAX_LABEL_VALUES`` distinct tools
(tenants, breaker keys); the rest are counted under ``OTHER`` (summed; a breaker at its worst
state), so hostile or generated names cannot make a series each. And each in length and
characters (``label_value``): a name is exported as it is when ``Gate.issue`` would take it as a
name (one line of visible text, at most ``MAX_NAME_CHARS`` characters), else as its first
``MAX_NAME_CHARS`` characters with each one that is not printable written as its backslash escape;
names equal once so written are one series (summed; the worst state). Counters admit tool names first come, once
for the life of the registry (a counted name keeps its series, a folded one stays folded), and a
scheduler keeps counts for at most that many names, so its memory is bounded too.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from opentelemetry import trace
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from agentgate._names import MAX_NAME_CHARS
from agentgate._shown import not_printable
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState
from agentgate.tasks._call import OTHER  # the label value of the values past MAX_LABEL_VALUES

BREAKER_STATE_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}

MAX_LABEL_VALUES = 1000
"""The most distinct values of a label (tool, tenant, breaker key) one family exports."""

WAIT_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def label_value(name: str) -> str:
    """The label value ``name`` (a tool, a tenant, a breaker key) is exported under: ``name`` itself
    when it is at most ``MAX_NAME_CHARS`` characters of which none is ``not_printable`` (every
    name ``Gate.issue`` and a policy take); else its first ``MAX_NAME_CHARS`` characters, each one
    that is not printable written as its backslash escape (``\\n``, ``\\x1b``, ``\\u202e``), cut again
    to ``MAX_NAME_CHARS``. A scheduler used alone takes names of any length and text from its
    callers; until review R62 each was a label value as it was: a 100,000-character tool in every
    scrape, and a carriage return, an escape sequence or a bidi override (the exposition format
    escapes only a backslash, a double quote and a line feed) in every dashboard showing it."""
    if len(name) <= MAX_NAME_CHARS and (name.isprintable() or not any(map(not_printable, name))):
        return name
    # Escaping only lengthens: the first MAX_NAME_CHARS characters are all the label can show.
    return "".join(
        char.encode("unicode_escape").decode("ascii") if not_printable(char) else char
        for char in name[:MAX_NAME_CHARS]
    )[:MAX_NAME_CHARS]


class _Admitted:
    """Label values admitted first come, at most ``limit``; any other value reads as ``OTHER``.
    Callers serialize calls (a lock, or the one event loop)."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self._seen: set[str] = set()
        self._limit = limit

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self._limit:
            return OTHER
        self._seen.add(value)
        return value


def _bounded(pairs: list[tuple[str, int]], fold: Callable[[int, int], int]) -> list[tuple[str, int]]:
    """``pairs`` (label, value; sorted by label) with at most ``MAX_LABEL_VALUES`` labels: the
    largest values kept, the rest folded into one ``OTHER`` value by ``fold``."""
    if len(pairs) <= MAX_LABEL_VALUES:
        return pairs
    ranked = sorted(pairs, key=lambda pair: -pair[1])
    kept, rest = ranked[:MAX_LABEL_VALUES], ranked[MAX_LABEL_VALUES:]
    other = rest[0][1]
    for _, value in rest[1:]:
        other = fold(other, value)
    return sorted([*kept, (OTHER, other)])


def _copy(mapping: Mapping[Any, int]) -> list[tuple[Any, int]]:
    # Scrapes run on another thread than the event loop; retry the copy if a dict changed size.
    for _ in range(10):
        try:
            return list(mapping.items())
        except RuntimeError:
            continue
    return []


class WaitHistogram:
    """Bucket counts of wait times, kept as plain integers (prometheus_client's ``Histogram`` takes a
    lock per observation, which the scheduler's hot path cannot afford) and exported on scrape."""

    def __init__(self, buckets: tuple[float, ...] = WAIT_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        """Count one wait of ``seconds``."""
        self.counts[bisect.bisect_left(self.buckets, seconds) if seconds > 0 else 0] += 1
        self.total += seconds

    def add(self, other: WaitHistogram) -> None:
        """Add ``other``'s counts (same buckets) to these."""
        for i, count in enumerate(list(other.counts)):
            self.counts[i] += count
        self.total += other.total

    def metric(self) -> HistogramMetricFamily:
        """The Prometheus view: cumulative buckets, ``+Inf``, sum."""
        cumulative, running = [], 0
        for bound, count in zip((*self.buckets, float("inf")), list(self.counts), strict=True):
            running += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return HistogramMetricFamily(
            "agentgate_tasks_wait_seconds",
            "Time each attempt waited for its slots (admission to start).",
            buckets=cumulative,
            sum_value=self.total,
        )


class _Collector:
    """The one collector of a registry: every scheduler's metrics registered there, each family once.

    Schedulers are held weakly. The counts of one that is collected are put on ``_gone`` by its
    finalizer (a list append: the finalizer may run inside ``collect`` or ``add``, in the middle of
    an allocation, so it takes no lock) and folded into the retired totals by the next scrape, so
    counters never go down. Schedulers sharing one admission state (one ``in_flight`` mapping) are
    read once for the gauges.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: weakref.WeakSet[SchedulerMetrics] = weakref.WeakSet()
        self._gone: list[tuple[dict[tuple[str, str], int], WaitHistogram]] = []
        self._retired_events: dict[tuple[str, str], int] = {}
        self._retired_wait = WaitHistogram()
        self._tools = _Admitted()

    def add(self, member: SchedulerMetrics) -> None:
        with self._lock:
            # Folded here too, not only on a scrape: a process that makes a scheduler per event
            # loop (``asyncio.run`` per request) and is never scraped kept every one's counts.
            self._fold_gone()
            self._members.add(member)
        weakref.finalize(member, self._gone.append, (member.events, member.wait))

    def _fold_gone(self) -> None:
        """Add the counts of the schedulers collected so far to the retired totals (lock held)."""
        while self._gone:
            gone_events, gone_wait = self._gone.pop()
            for key, count in _copy(gone_events):
                tool_key = (key[0], self._tools(key[1]))
                self._retired_events[tool_key] = self._retired_events.get(tool_key, 0) + count
            self._retired_wait.add(gone_wait)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self._fold_gone()
            members = list(self._members)
            events = dict(self._retired_events)
            wait = WaitHistogram(self._retired_wait.buckets)
            wait.add(self._retired_wait)
        sources = list({id(m.in_flight): m for m in members}.values())  # one per admission state
        depth = GaugeMetricFamily("agentgate_tasks_queue_depth", "Calls waiting to start.", labels=["tenant"])
        for tenant, count in _bounded(_summed(_copy(m.queue_depth()) for m in sources), int.__add__):
            depth.add_metric([tenant], count)
        yield depth
        running = GaugeMetricFamily("agentgate_tasks_in_flight", "Attempts running.", labels=["tool"])
        for tool, count in _bounded(_summed(_copy(m.in_flight) for m in sources), int.__add__):
            running.add_metric([tool], count)
        yield running
        for member in members:
            for key, count in _copy(member.events):
                events[key] = events.get(key, 0) + count
            wait.add(member.wait)
        with self._lock:  # several schedulers' names: admitted here too, once per registry
            folded: dict[tuple[str, str], int] = {}
            for (event, tool), count in sorted(events.items()):
                key = (event, self._tools(tool))
                folded[key] = folded.get(key, 0) + count
        events = folded
        family = CounterMetricFamily("agentgate_tasks_events", "Scheduling events.", labels=["event", "tool"])
        for (event, tool), count in sorted(events.items()):
            family.add_metric([event, tool], count)
        yield family
        state = GaugeMetricFamily(
            "agentgate_tasks_breaker_state",
            "Circuit breaker state: 0 closed, 1 half open, 2 open.",
            labels=["key"],
        )
        worst: dict[str, int] = {}
        for source in sources:
            for snap in source.breakers():
                key = label_value(snap.key)
                worst[key] = max(worst.get(key, 0), BREAKER_STATE_VALUE[snap.state])
        for key, value in _bounded(sorted(worst.items()), max):
            state.add_metric([key], value)
        yield state
        yield wait.metric()


def _summed(parts: Iterable[list[tuple[str, int]]]) -> list[tuple[str, int]]:
    total: dict[str, int] = {}
    for part in parts:
        for name, count in part:
            label = label_value(name)
            total[label] = total.get(label, 0) + count
    return sorted(total.items())


_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, _Collector] = weakref.WeakKeyDictionary()
_COLLECTORS_LOCK = threading.Lock()


def _collector(registry: CollectorRegistry) -> _Collector:
    """The collector of ``registry``, registered there by the first scheduler that uses it."""
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(registry)
        if collector is None:
            collector = _COLLECTORS[registry] = _Collector()
            registry.register(collector)
        return collector


class SchedulerMetrics:
    """The scheduler's counters and their Prometheus view.

    ``event`` and ``tally`` may be called from any thread: they count under the metrics' own lock
    (a breaker transition is counted on the thread that made it, beside the scheduler's loop and
    the sync facade's callers; unguarded, two threads counting one pair lost counts). The two
    counts made without it are the async scheduler's ``started`` and ``queued`` (``_run`` and
    ``SharedLimits.enqueue`` with its loop; review R72 added ``queued``), on its hot path: only that
    scheduler's loop counts them for it, so no other thread writes those pairs.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None,
        *,
        queue_depth: Callable[[], Mapping[str, int]],
        in_flight: Mapping[str, int],
        breakers: Callable[[], list[BreakerSnapshot]],
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.events: dict[tuple[str, str], int] = {}
        self.wait = WaitHistogram()
        self.observe_wait = self.wait.observe
        self.queue_depth = queue_depth
        self.in_flight = in_flight
        self.breakers = breakers
        self._tools = _Admitted()
        self._lock = threading.Lock()  # held around a count only, calling nothing: never nested
        _collector(self.registry).add(self)

    def _admit(self, name: str, tool: str) -> tuple[tuple[str, str], int]:
        """The key and count of a pair not counted yet: the tool's ``label_value``, or past
        ``MAX_LABEL_VALUES`` tools ``OTHER``."""
        with self._lock:
            key = (name, self._tools(label_value(tool)))
            return key, self.events.get(key, 0)

    def event(self, name: str, tool: str, attributes: Mapping[str, str | int | float | bool]) -> None:
        """Count ``name`` for ``tool`` and add it to the current span when one is recording, its
        text (the tool's and the tenant's names) cut to ``MAX_NAME_CHARS`` characters: a
        scheduler used alone takes names of any length from its caller, and an event carried a
        name whole (until review R60, a 1,000,000-character tool name on each event of its call)."""
        self.tally(name, tool)
        span = trace.get_current_span()
        if span.is_recording():
            values = {"agentgate.tool": tool, **attributes}
            span.add_event(
                f"agentgate.task.{name}",
                {k: v[:MAX_NAME_CHARS] if type(v) is str else v for k, v in values.items()},
            )

    def tally(self, name: str, tool: str) -> None:
        """Count ``name`` for ``tool`` only: for callers that know no span is recording."""
        events = self.events
        with self._lock:
            key = (name, tool)
            count = events.get(key)
            if count is None:  # a new name, or one exported as its label_value; past MAX_LABEL_VALUES, OTHER
                key = (name, self._tools(label_value(tool)))
                count = events.get(key, 0)
            events[key] = count + 1

    def count(self, name: str, tool: str) -> int:
        """How many ``name`` events ``tool``'s label (``label_value``) had (a tool past
        ``MAX_LABEL_VALUES`` is counted as ``OTHER``)."""
        return self.events.get((name, label_value(tool)), 0)
