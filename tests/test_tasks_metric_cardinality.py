"""Metric label cardinality against hostile names.

Real schedulers and real Prometheus registries. Each test failed on the code before its fix.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentgate.tasks import SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState
from agentgate.tasks._metrics import MAX_LABEL_VALUES, OTHER, SchedulerMetrics

HOSTILE = 10_000


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    text = generate_latest(registry).decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def test_ten_thousand_tool_names_make_a_bounded_number_of_series_and_lose_no_count() -> None:
    """Every distinct tool name was a series of ``agentgate_tasks_events_total`` and of
    ``agentgate_tasks_breaker_state`` (and a key of the scheduler's counts, kept for its life):
    10,000 generated names made 10,000 series in each family, undocumented."""
    registry = CollectorRegistry()
    scheduler = SyncScheduler(SchedulerConfig(), registry=registry)
    try:
        for i in range(HOSTILE):
            assert scheduler.submit(ToolCall(tool=f"made.up.{i}", arguments={}), lambda _a: "ok") == "ok"
        samples = _samples(registry)
    finally:
        scheduler.close()
    series = Counter(name for name, _, _ in samples)
    assert series["agentgate_tasks_events_total"] <= MAX_LABEL_VALUES + 1
    assert series["agentgate_tasks_breaker_state"] <= MAX_LABEL_VALUES + 1
    started = [(labels, v) for name, labels, v in samples if name == "agentgate_tasks_events_total"]
    assert sum(v for labels, v in started if labels["event"] == "started") == HOSTILE  # none lost
    assert any(labels["tool"] == OTHER for labels, _ in started)
    assert len(scheduler.scheduler.metrics.events) <= MAX_LABEL_VALUES + 1  # its memory too


def test_a_counted_tool_keeps_its_series_and_counters_never_go_down_after_the_bound() -> None:
    """Past the bound, new names fold into ``_other``; names already exported keep their series,
    and no exported counter decreases between scrapes (a series moving into ``_other`` would)."""
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry, queue_depth=dict, in_flight={}, breakers=list)
    for i in range(MAX_LABEL_VALUES):
        metrics.tally("started", f"t{i:05d}")
    first = {
        tuple(sorted(labels.items())): v for name, labels, v in _samples(registry) if name.endswith("_total")
    }
    for i in range(MAX_LABEL_VALUES, HOSTILE):
        metrics.tally("started", f"t{i:05d}")
    metrics.tally("started", "t00000")
    second = {
        tuple(sorted(labels.items())): v for name, labels, v in _samples(registry) if name.endswith("_total")
    }
    assert all(second[key] >= value for key, value in first.items())
    assert second[(("event", "started"), ("tool", "t00000"))] == 2
    assert len(second) <= MAX_LABEL_VALUES + 1
    assert sum(second.values()) == HOSTILE + 1


def test_gauges_of_ten_thousand_tenants_tools_and_breaker_keys_are_bounded_and_summed() -> None:
    """Queue depth by tenant, in-flight by tool and breaker state by key: a series per value."""
    registry = CollectorRegistry()
    depth = {f"tenant-{i}": 1 for i in range(HOSTILE)}
    running = {f"tool-{i}": 2 for i in range(HOSTILE)}
    breakers = [
        BreakerSnapshot(f"tool:k{i}", BreakerState.OPEN if i % 2 else BreakerState.CLOSED, 0, 0, 0.0)
        for i in range(HOSTILE)
    ]
    kept = SchedulerMetrics(registry, queue_depth=lambda: depth, in_flight=running, breakers=lambda: breakers)
    samples = _samples(registry)
    del kept  # held until scraped: a registry holds its schedulers weakly
    per = Counter(name for name, _, _ in samples)
    assert per["agentgate_tasks_queue_depth"] <= MAX_LABEL_VALUES + 1
    assert per["agentgate_tasks_in_flight"] <= MAX_LABEL_VALUES + 1
    total = {name: sum(v for n, _, v in samples if n == name) for name in per}
    assert total["agentgate_tasks_queue_depth"] == HOSTILE
    assert total["agentgate_tasks_in_flight"] == 2 * HOSTILE
    assert per["agentgate_tasks_breaker_state"] <= MAX_LABEL_VALUES + 1
    states = {labels["key"]: v for n, labels, v in samples if n == "agentgate_tasks_breaker_state"}
    assert states[OTHER] == 2  # the worst of the folded keys: open ones are among them
