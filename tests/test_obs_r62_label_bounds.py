"""Prometheus label values bounded in length and characters, not only in number.

Real schedulers, real ``CollectorRegistry`` objects, scraped as Prometheus text by the library's
own ``generate_latest`` (agentgate serves no scheduler metrics itself: the application serves
``Gate.registry``) and read back by the library's parser.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentgate._names import MAX_NAME_CHARS
from agentgate.tasks import SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._breaker import BreakerSnapshot, BreakerState
from agentgate.tasks._metrics import SchedulerMetrics, label_value

LONG = 100_000


def _scrape(registry: CollectorRegistry) -> tuple[str, list[tuple[str, dict[str, str], float]]]:
    text = generate_latest(registry).decode()
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    return text, samples


def test_a_hundred_thousand_character_tool_and_tenant_are_cut_on_every_scrape() -> None:
    """Review R62: a scheduler used alone takes names of any length, and every family exported
    them whole as label values: a 100,000-character tool (and its breaker key) and tenant were
    in each scrape, for the life of the registry. Each label value is at most ``MAX_NAME_CHARS``
    characters, the counts kept."""
    tool, tenant = "t" * LONG, "n" * LONG
    registry = CollectorRegistry()
    scheduler = SyncScheduler(SchedulerConfig(), registry=registry)
    try:
        for _ in range(3):
            assert scheduler.submit(ToolCall(tool=tool, tenant=tenant, arguments={}), lambda _a: "ok") == "ok"
        gauges = SchedulerMetrics(
            registry,
            queue_depth=lambda: {tenant: 2},
            in_flight={tool: 1},
            breakers=lambda: [BreakerSnapshot("tool:" + tool, BreakerState.OPEN, 0, 0, 0.0)],
        )
        text, samples = _scrape(registry)
        del gauges  # held until scraped: a registry holds its schedulers weakly
    finally:
        scheduler.close()
    assert len(text) < 20_000, len(text)
    values = [value for _, labels, value in samples for value in labels.values()]
    assert values and max(len(v) for v in values) <= MAX_NAME_CHARS
    started = [
        v
        for name, labels, v in samples
        if name == "agentgate_tasks_events_total" and labels["event"] == "started"
    ]
    assert started == [3.0]
    depth = [(labels, v) for name, labels, v in samples if name == "agentgate_tasks_queue_depth"]
    assert depth == [({"tenant": tenant[:MAX_NAME_CHARS]}, 2.0)]
    state = [(labels, v) for name, labels, v in samples if name == "agentgate_tasks_breaker_state"]
    assert ({"key": ("tool:" + tool)[:MAX_NAME_CHARS]}, 2.0) in state


def test_names_equal_once_cut_are_one_series_with_their_sum() -> None:
    """Review R62: two long names that share their first ``MAX_NAME_CHARS`` characters must not
    make two series with one label set (a scrape Prometheus rejects as duplicate samples): they
    are one series, their counts summed (gauges) or the worst state (breakers)."""
    stem = "s" * MAX_NAME_CHARS
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(
        registry,
        queue_depth=lambda: {stem + "a": 1, stem + "b": 2},
        in_flight={stem + "a": 3, stem + "b": 4},
        breakers=lambda: [
            BreakerSnapshot(stem + "a", BreakerState.CLOSED, 0, 0, 0.0),
            BreakerSnapshot(stem + "b", BreakerState.OPEN, 0, 0, 0.0),
        ],
    )
    metrics.tally("started", stem + "a")
    metrics.tally("started", stem + "b")
    metrics.tally("started", stem + "b")
    _, samples = _scrape(registry)
    series = Counter((name, tuple(sorted(labels.items()))) for name, labels, _ in samples)
    assert max(series.values()) == 1, [key for key, n in series.items() if n > 1]
    by = {(name, tuple(labels.values())): v for name, labels, v in samples}
    assert by[("agentgate_tasks_queue_depth", (stem,))] == 3
    assert by[("agentgate_tasks_in_flight", (stem,))] == 7
    assert by[("agentgate_tasks_breaker_state", (stem,))] == 2
    assert by[("agentgate_tasks_events_total", ("started", stem))] == 3
    assert metrics.count("started", stem + "b") == 3  # counted under the label it is exported as


def test_a_label_value_is_one_line_of_visible_text() -> None:
    """Review R62: a tool named with a line break, a carriage return, an escape sequence or a
    bidi override was exported as it is: the library escapes only a backslash, a double quote and
    a line feed, so a dashboard or a terminal showing the label showed (or was moved by) the
    rest. Each character a name of ``Gate.issue`` may not hold is written as its backslash
    escape; the exposition's own escaping reads back exactly."""
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry, queue_depth=dict, in_flight={}, breakers=list)
    hostile = 'evil\n# TYPE x counter\r\x1b[2J\u202egnp.exe"\\'
    metrics.tally("started", hostile)
    quoted = 'say "hi" \\ café'
    metrics.tally("started", quoted)
    text, samples = _scrape(registry)
    tools = sorted(labels["tool"] for name, labels, _ in samples if name == "agentgate_tasks_events_total")
    assert tools == sorted(['evil\\n# TYPE x counter\\r\\x1b[2J\\u202egnp.exe"\\', quoted])
    assert not any(line.startswith("# TYPE x") for line in text.splitlines())
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text


def test_a_name_the_gate_takes_is_its_own_label_value() -> None:
    """Review R62: the bound changes no name ``Gate.issue`` and the policy take (visible text
    of at most ``MAX_NAME_CHARS`` characters, spaces and non-ASCII letters included)."""
    for name in ("search", "tool:search", "Ünïcode tenant 名前", "x" * MAX_NAME_CHARS, "a b\u00a0c"):
        assert label_value(name) == name
