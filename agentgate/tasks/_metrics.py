"""What the scheduler shows: OpenTelemetry span events and Prometheus metrics.

Span events go on the caller's current span (the ``execute_tool`` span of the integration), named
``agentgate.task.<event>``: queued, started, retried, gave_up, shed, reused, breaker_opened,
breaker_half_open, breaker_closed. Nothing is recorded when no span is recording, so the cost
without tracing is one context lookup.

Prometheus metrics live in a per-scheduler ``CollectorRegistry`` (pass one to share it). Gauges
are read from the scheduler's own counters when scraped, so the hot path only bumps integers:

- ``agentgate_tasks_queue_depth{tenant}``: calls waiting.
- ``agentgate_tasks_in_flight{tool}``: attempts running.
- ``agentgate_tasks_events_total{event,tool}``: every scheduling event (retries are ``retried``).
- ``agentgate_tasks_breaker_state{key}``: 0 closed, 1 half open, 2 open.
- ``agentgate_tasks_wait_seconds``: time each attempt waited for its slots, histogram.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from opentelemetry import trace
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from agentgate.tasks._breaker import BreakerSnapshot, BreakerState

BREAKER_STATE_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}

WAIT_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


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
    def __init__(
        self,
        queue_depth: Callable[[], Mapping[str, int]],
        in_flight: Mapping[str, int],
        events: Mapping[tuple[str, str], int],
        breakers: Callable[[], list[BreakerSnapshot]],
        wait: WaitHistogram,
    ) -> None:
        self._wait = wait
        self._queue_depth = queue_depth
        self._in_flight = in_flight
        self._events = events
        self._breakers = breakers

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("agentgate_tasks_queue_depth", "Calls waiting to start.", labels=["tenant"])
        for tenant, count in _copy(self._queue_depth()):
            depth.add_metric([tenant], count)
        yield depth
        running = GaugeMetricFamily("agentgate_tasks_in_flight", "Attempts running.", labels=["tool"])
        for tool, count in _copy(self._in_flight):
            running.add_metric([tool], count)
        yield running
        events = CounterMetricFamily("agentgate_tasks_events", "Scheduling events.", labels=["event", "tool"])
        for (event, tool), count in _copy(self._events):
            events.add_metric([event, tool], count)
        yield events
        state = GaugeMetricFamily(
            "agentgate_tasks_breaker_state",
            "Circuit breaker state: 0 closed, 1 half open, 2 open.",
            labels=["key"],
        )
        for snap in self._breakers():
            state.add_metric([snap.key], BREAKER_STATE_VALUE[snap.state])
        yield state
        yield self._wait.metric()


class SchedulerMetrics:
    """The scheduler's counters and their Prometheus view."""

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
        self.registry.register(_Collector(queue_depth, in_flight, self.events, breakers, self.wait))

    def event(self, name: str, tool: str, attributes: Mapping[str, str | int | float | bool]) -> None:
        """Count ``name`` for ``tool`` and add it to the current span when one is recording."""
        key = (name, tool)
        self.events[key] = self.events.get(key, 0) + 1
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(f"agentgate.task.{name}", {"agentgate.tool": tool, **attributes})

    def tally(self, name: str, tool: str) -> None:
        """Count ``name`` for ``tool`` only: for callers that know no span is recording."""
        key = (name, tool)
        self.events[key] = self.events.get(key, 0) + 1

    def count(self, name: str, tool: str) -> int:
        """How many ``name`` events ``tool`` had."""
        return self.events.get((name, tool), 0)
