"""The baselines follow their documented rules; the simulator reproduces the Mooncake paper's ordering."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.baselines import (
    BASELINES,
    DynamoKvRouter,
    LeastBusyRouter,
    LlmdRouter,
    LoadBalancedRouter,
    LowestLatencyRouter,
    MooncakeRouter,
    RandomRouter,
    SGLangCacheAwareRouter,
)
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.metrics import EngineLoad
from agentgate.dispatch.router import RouteRequest
from agentgate.dispatch.state import SpeedModel
from agentgate.errors import Shed
from agentgate.sim import LLAMA_8B_H200, Engine, EngineConfig, chain_hashes, load_trace, replay
from agentgate.sim.routing import PolicyDispatcher

MOONCAKE = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "traces"
    / "mooncake_conversation_trace.jsonl"
)


def pool(n: int) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": "http://x", "models": ["m"], "kv_capacity_tokens": 900_000}
                for i in range(n)
            ]
        }
    )


def req(i: int, prompt: int = 1600, hashes: tuple[int, ...] | None = None, **kw: object) -> RouteRequest:
    h = hashes if hashes is not None else chain_hashes((i, b) for b in range(prompt // 16))
    return RouteRequest(id=f"r{i}", model="m", prompt_tokens=prompt, prefix_hashes=h, **kw)  # type: ignore[arg-type]


def test_least_busy_takes_the_fewest_in_flight() -> None:
    router = LeastBusyRouter(pool(3))
    for i in range(6):
        router.route(req(i), 0.0)
    assert sorted(router.in_flight(f"b{i}") for i in range(3)) == [2, 2, 2]


def test_lowest_latency_tries_untried_backends_then_the_fastest() -> None:
    router = LowestLatencyRouter(pool(2))
    first = router.route(req(0), 0.0).backend
    router.first_token("r0", 5.0)  # slow
    router.finished("r0", 6.0)
    second = router.route(req(1), 6.0).backend
    assert second != first  # untried scores 0
    router.first_token("r1", 6.1)
    router.finished("r1", 6.2)
    assert router.route(req(2), 7.0).backend == second


def test_sglang_follows_cache_when_balanced_and_load_when_imbalanced() -> None:
    router = SGLangCacheAwareRouter(pool(2))
    shared = chain_hashes(range(100))
    home = router.route(req(0, hashes=shared), 0.0).backend
    assert router.route(req(1, hashes=shared), 0.0).backend == home  # match rate > 0.5
    for i in range(40):  # imbalance beyond 32 requests
        router.route(req(100 + i), 0.0, allowed=lambda b: b.name == home)
    assert router.route(req(2, hashes=shared), 0.0).backend != home


def test_dynamo_logit_is_prefill_blocks_plus_active_blocks() -> None:
    router = DynamoKvRouter(pool(2), block_tokens=16)
    shared = chain_hashes(range(100))
    home = router.route(req(0, prompt=1600, hashes=shared), 0.0).backend
    router.finished("r0", 1.0)
    assert router.route(req(1, prompt=1600, hashes=shared), 1.0).backend == home


def test_llmd_prefers_low_queue_and_kv_from_scraped_metrics() -> None:
    router = LlmdRouter(pool(2))
    router.observe("b0", EngineLoad(running=10, waiting=8, kv_usage=0.9, scraped_at=0.0))
    router.observe("b1", EngineLoad(running=1, waiting=0, kv_usage=0.1, scraped_at=0.0))
    assert router.route(req(0), 0.1).backend == "b1"


def test_mooncake_rejects_what_cannot_meet_the_slo() -> None:
    router = MooncakeRouter(pool(1), speed=SpeedModel())
    with pytest.raises(Shed):
        router.route(req(0, prompt=100_000, slo_ttft_s=0.5), 0.0)
    assert router.route(req(1, prompt=1000, slo_ttft_s=5.0), 0.0).backend == "b0"


def test_every_baseline_is_registered() -> None:
    assert set(BASELINES) == {
        "random",
        "round-robin",
        "litellm-least-busy",
        "litellm-latency",
        "sglang-cache-aware",
        "llm-d",
        "dynamo-kv",
        "mooncake",
        "load-balanced",
    }


@pytest.mark.slow
def test_simulator_reproduces_mooncake_ordering_random_then_load_balanced_then_cache_aware() -> None:
    trace = load_trace(MOONCAKE, limit=600)
    trace = [dataclasses.replace(r, arrival=r.arrival * 0.3, slo_ttft_s=1e9) for r in trace]
    inv = pool(6)
    speed = SpeedModel(base_s=LLAMA_8B_H200.base_s, kv_read_s=LLAMA_8B_H200.kv_read_s)
    mean_ttft = {}
    for cls in (RandomRouter, LoadBalancedRouter, MooncakeRouter):
        engines = {b.name: Engine(LLAMA_8B_H200, EngineConfig(block_tokens=512)) for b in inv.backends}
        policy = cls(inv, speed=speed, block_tokens=512, seed=3)
        out = replay(trace, engines, PolicyDispatcher(policy, "m"))
        mean_ttft[cls.name] = statistics.fmean(o.ttft for o in out if o.ttft is not None)
    assert mean_ttft["random"] > mean_ttft["load-balanced"] > mean_ttft["mooncake"], mean_ttft
