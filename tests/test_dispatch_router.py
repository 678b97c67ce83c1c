"""The agentgate router's rule: filters, predicted TTFT, cache locality, ties, affinity, classes, quotas."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.metrics import EngineLoad
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.dispatch.scorers import predicted_ttft
from agentgate.errors import NoBackend, Shed
from agentgate.sim import chain_hashes


def pool(n: int = 4, model: str = "m", **extra: object) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": f"http://127.0.0.1:{9000 + i}", "models": [model], **extra}
                for i in range(n)
            ]
        }
    )


def req(i: int, prompt: int = 2000, **kw: object) -> RouteRequest:
    fields: dict[str, object] = {
        "id": f"r{i}",
        "model": "m",
        "prompt_tokens": prompt,
        "max_output_tokens": 100,
        "prefix_hashes": chain_hashes((i, b) for b in range(prompt // 16)),
    }
    fields.update(kw)
    return RouteRequest(**fields)  # type: ignore[arg-type]


def at(request: RouteRequest, now: float) -> RouteRequest:
    """The request as if it arrived at ``now``."""
    return dataclasses.replace(request, arrived_at=now)


def test_only_backends_that_serve_are_healthy_and_allowed_are_candidates() -> None:
    router = Router(pool(3))
    with pytest.raises(NoBackend, match="serves model"):
        router.route(req(0, model="other"), 0.0)
    with pytest.raises(NoBackend, match="may use none"):
        router.route(req(0), 0.0, allowed=lambda b: False)
    router.mark_down("b0")
    router.mark_down("b1")
    assert router.route(req(0), 0.0).backend == "b2"
    assert router.route(req(1), 0.0, allowed=lambda b: b.name != "b1").backend == "b2"
    router.mark_down("b2")
    with pytest.raises(NoBackend, match="down"):
        router.route(req(2), 0.0)


def test_in_flight_is_counted_at_dispatch_and_spreads_a_burst() -> None:
    router = Router(pool(4))
    plans = [router.route(req(i), 0.0) for i in range(40)]
    counts = Counter(p.backend for p in plans)
    assert sum(router.in_flight(b) for b in counts) == 40
    assert max(counts.values()) - min(counts.values()) <= 2
    for p in plans:
        router.first_token(p.request_id, 1.0)
        router.finished(p.request_id, 2.0)
    assert all(router.in_flight(f"b{i}") == 0 for i in range(4))


def test_a_cached_prefix_wins_over_an_idle_backend() -> None:
    router = Router(pool(4))
    first = router.route(req(1, prompt=8000), 0.0)
    router.first_token("r1", 0.5)
    router.finished("r1", 1.0)
    again = router.route(at(req(1, prompt=8200, id="r1-turn2"), 2.0), 2.0)
    assert again.backend == first.backend
    assert again.cached_tokens >= 7900


def test_saturated_cache_holder_loses_to_a_fast_empty_backend() -> None:
    router = Router(pool(2))
    holder = router.route(req(1, prompt=4000), 0.0).backend
    router.finished("r1", 0.1)
    for i in range(20):  # pile queued prefill onto the holder
        router.route(req(100 + i, prompt=8000), 0.2, allowed=lambda b: b.name == holder)
    plan = router.route(at(req(1, prompt=4100, id="turn2", session="s"), 0.3), 0.3)
    assert plan.backend != holder


def test_engine_metrics_raise_the_routers_estimate() -> None:
    router = Router(pool(2))
    router.observe("b0", EngineLoad(running=200, waiting=30, kv_usage=0.95, scraped_at=0.0))
    router.observe("b1", EngineLoad(running=0, waiting=0, kv_usage=0.0, scraped_at=0.0))
    assert all(router.route(at(req(i), 0.1), 0.1).backend == "b1" for i in range(3))


def test_stale_metrics_are_ignored() -> None:
    router = Router(pool(2), metrics_max_age_s=1.0)
    router.observe("b0", EngineLoad(running=200, waiting=30, kv_usage=0.95, scraped_at=0.0))
    assert router.states["b0"].fresh_load(5.0) is None
    assert {router.route(at(req(i), 5.0), 5.0).backend for i in range(8)} == {"b0", "b1"}


def test_session_affinity_holds_unless_saturated() -> None:
    router = Router(pool(4))
    first = router.route(req(1, session="run-7", prefix_hashes=()), 0.0).backend
    router.finished("r1", 0.1)
    for turn in range(3):
        plan = router.route(at(req(10 + turn, session="run-7", prefix_hashes=()), 1.0 + turn), 1.0 + turn)
        assert plan.backend == first and plan.reason == "session affinity"
        router.finished(plan.request_id, 1.5 + turn)
    for i in range(10):  # saturate the run's backend
        router.route(
            at(req(100 + i, prompt=16000, slo_ttft_s=100.0), 5.0), 5.0, allowed=lambda b: b.name == first
        )
    assert router.route(at(req(20, session="run-7", prefix_hashes=()), 5.0), 5.0).backend != first


def test_when_no_backend_meets_the_slo_lower_classes_wait_or_are_shed() -> None:
    router = Router(pool(1))
    for i in range(5):
        router.route(req(i, prompt=16000, slo_ttft_s=1000.0), 0.0)
    urgent = router.route(req(100, slo_ttft_s=0.5, priority=0), 0.0)
    assert urgent.action == "dispatch" and not urgent.meets_slo
    standard = router.route(req(101, slo_ttft_s=3.0, priority=1), 0.0)
    assert standard.action == "wait" and standard.wait_s > 0
    with pytest.raises(Shed) as info:
        router.route(req(102, slo_ttft_s=0.5, priority=2), 0.0)
    assert info.value.retry_after_s >= 1.0


def test_tenant_over_its_quota_is_shed_first_under_load() -> None:
    quotas = {"greedy": TenantQuota(rate_tokens_per_s=1000, burst_tokens=5000)}
    router = Router(pool(1), quotas=quotas)
    router.route(req(0, prompt=4000, tenant="greedy", slo_ttft_s=100.0), 0.0)  # spends the bucket
    for i in range(30):
        router.route(req(10 + i, prompt=16000, slo_ttft_s=1000.0), 0.0)
    with pytest.raises(Shed, match="quota") as info:
        router.route(req(1, prompt=4000, tenant="greedy", slo_ttft_s=0.5, priority=0), 0.1)
    assert info.value.retry_after_s >= 1.0
    assert (
        router.route(req(2, prompt=4000, tenant="polite", slo_ttft_s=0.5, priority=0), 0.1).action
        == "dispatch"
    )


def test_observed_ttft_corrects_the_prediction() -> None:
    router = Router(pool(1), predictor=predicted_ttft(calibrated=True))
    for i in range(30):
        plan = router.route(at(req(i), float(i)), float(i))
        router.first_token(plan.request_id, i + plan.predicted_ttft_s * 2)
        router.finished(plan.request_id, i + 0.9)
    assert router.states["b0"].correction > 1.5
    plan = router.route(at(req(99), 40.0), 40.0)
    uncalibrated = predicted_ttft()(router.states["b0"], at(req(100), 40.0), 40.0)
    assert plan.predicted_ttft_s > 1.4 * uncalibrated


def test_route_plan_is_frozen() -> None:
    plan = Router(pool(1)).route(req(0), 0.0)
    with pytest.raises(AttributeError):
        plan.backend = "x"  # type: ignore[misc]
