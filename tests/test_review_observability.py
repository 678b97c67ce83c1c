"""(Review R9) What agentgate tells operators, and what it never tells anyone: spans, metrics, logs.

Real OpenTelemetry SDK with an in-memory exporter, real schedulers and Prometheus registries, real
Gates on SQLite files, real LangGraph agents driven by ``ScriptedChatModel``, the gateway over
real HTTP on 127.0.0.1. Canary secrets are planted in every place a secret can come from, and
every exported byte (spans, metrics, logs at DEBUG, messages to models, HTTP answers) is grepped.
"""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

# --- metrics: schedulers sharing one registry ------------------------------------------------------


def _families(registry: CollectorRegistry) -> list[str]:
    """The metric family names of the registry's exposition, in order, repeats kept."""
    return [f.name for f in text_string_to_metric_families(generate_latest(registry).decode())]


def _samples(registry: CollectorRegistry, name: str) -> list[tuple[dict[str, str], float]]:
    """Every exported sample called ``name``, with its labels."""
    text = generate_latest(registry).decode()
    return [
        (s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    ]


def test_schedulers_sharing_a_registry_export_each_family_once_with_summed_counts() -> None:
    """Several schedulers on one registry (documented: pass one to share it; a Gate makes one per
    event loop) exported every family once per scheduler: the same series twice, which Prometheus
    refuses ('second TYPE line'); a registry that checks names (prometheus_client's global
    REGISTRY) raised DuplicateTimeseries when the second scheduler was made."""
    registry = CollectorRegistry()
    first = Scheduler(registry=registry)
    with SyncScheduler(registry=registry) as second:
        assert second.submit(ToolCall("lookup"), lambda attempt: 1) == 1

        async def once() -> None:
            async def run(attempt: Attempt) -> int:
                return 2

            await first.submit(ToolCall("lookup"), run)
            await first.aclose()

        asyncio.run(once())
        families = _families(registry)
        assert sorted(families) == sorted(set(families)), families
        assert (
            registry.get_sample_value("agentgate_tasks_events_total", {"event": "started", "tool": "lookup"})
            == 2
        )
        assert registry.get_sample_value("agentgate_tasks_wait_seconds_count") == 2

    checked = CollectorRegistry(auto_describe=True)  # as prometheus_client.REGISTRY
    Scheduler(registry=checked)
    Scheduler(registry=checked)  # raised DuplicateTimeseries
    assert sorted(_families(checked)) == sorted(set(_families(checked)))


def test_a_shared_registry_counts_shared_limits_once_and_keeps_a_dropped_schedulers_counts() -> None:
    """Schedulers sharing their admission state (a Gate's sync and async paths) read the same
    in-flight counts: exported once, not once per scheduler. A scheduler that is gone leaves its
    events in the counter (a counter never goes down)."""
    registry = CollectorRegistry()
    config = SchedulerConfig(tools={"slow": ToolLimits(concurrency=2)})
    sync = SyncScheduler(config, registry=registry)
    try:
        other = Scheduler(limits=sync.scheduler.shared, registry=registry)
        release, started = threading.Event(), threading.Event()

        def hold(attempt: Attempt) -> str:
            started.set()
            release.wait(5)
            return "done"

        worker = threading.Thread(target=sync.submit, args=(ToolCall("slow"), hold))
        worker.start()
        try:
            assert started.wait(5)
            assert _samples(registry, "agentgate_tasks_in_flight") == [({"tool": "slow"}, 1.0)]
        finally:
            release.set()
            worker.join(5)
        del other
        gone = Scheduler(registry=registry)
        gone.metrics.event("shed", "slow", {})
        del gone
        gc.collect()
        assert (
            registry.get_sample_value("agentgate_tasks_events_total", {"event": "shed", "tool": "slow"}) == 1
        )
        assert (
            registry.get_sample_value("agentgate_tasks_events_total", {"event": "started", "tool": "slow"})
            == 1
        )
    finally:
        sync.close()


@pytest.mark.parametrize("tools", [1, 3])
def test_each_scheduler_of_its_own_still_reports_only_its_own_calls(tools: int) -> None:
    """Without a shared registry nothing changes: a scheduler's registry holds its calls only."""
    with SyncScheduler() as mine, SyncScheduler() as theirs:
        for i in range(tools):
            mine.submit(ToolCall(f"t{i}"), lambda attempt: None)
        theirs.submit(ToolCall("t0"), lambda attempt: None)
        assert (
            mine.registry.get_sample_value("agentgate_tasks_events_total", {"event": "started", "tool": "t0"})
            == 1
        )
        assert sum(value for _, value in _samples(mine.registry, "agentgate_tasks_events_total")) == tools
