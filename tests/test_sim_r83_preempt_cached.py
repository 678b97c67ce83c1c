"""Review R83 of the engine: a preempted request's cached tokens and the prefix-cache counters.

A request preempted after its first token released its KV into the evictable cache; its
re-admission then matched its own blocks and reported its recomputed prompt as a prefix-cache
hit: in ``Outcome.cached_tokens`` (the dispatch benchmark's hit rate), in the HTTP usage
``prompt_tokens_details.cached_tokens`` and in ``vllm:prefix_cache_hits``, although no prompt
shared a block. vLLM V1 keeps the first scheduling's ``num_cached_tokens`` and counts a
re-admission apart (``preempted_queries``/``preempted_hits``), not under ``prefix_cache_hits``.
The re-admission still reuses what the cache holds for its timing, as a real engine would.
"""

from __future__ import annotations

import asyncio
import json

import _http
from test_sim_trace_loaders import _SendAll

from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, SimServer, replay
from agentgate.sim.traces import TraceRequest, chain_hashes

_BLOCK = 16


def _two_unrelated_prompts() -> list[TraceRequest]:
    """Two 160-token prompts that share no block; 600 tokens of KV preempt the newer one."""
    return [
        TraceRequest(f"r{i}", 0.0, 160, 200, chain_hashes((i, b) for b in range(10)), block_tokens=_BLOCK)
        for i in range(2)
    ]


def test_a_preempted_request_reports_no_hit_on_its_own_prompt() -> None:
    """Review R83: the preempted request reported 144 of its 160 tokens cached, and the engine
    counted 480 queries and 144 hits; now it reports its first admission's 0 and the counters
    count each request's first admission only."""
    engine = Engine(LLAMA_8B_H100, EngineConfig(block_tokens=_BLOCK, kv_capacity_tokens=600))
    outcomes = replay(_two_unrelated_prompts(), {"b": engine}, _SendAll())  # type: ignore[arg-type]
    assert engine.preemptions >= 1 and any(o.preemptions for o in outcomes)
    assert all(o.finished_at is not None for o in outcomes)
    assert [o.cached_tokens for o in outcomes] == [0, 0]
    metrics = engine.metrics()
    assert metrics["vllm:prefix_cache_queries"] == 320.0
    assert metrics["vllm:prefix_cache_hits"] == 0.0


def test_a_shared_prefix_hit_is_kept_through_a_preemption() -> None:
    """The first admission's hit is what the request reports, preempted or not."""
    shared = chain_hashes(("p", b) for b in range(5))
    trace = [
        TraceRequest(
            "first", 0.0, 160, 2, shared + chain_hashes(("a", b) for b in range(5)), block_tokens=_BLOCK
        ),
        TraceRequest(
            "r0", 1.0, 160, 200, shared + chain_hashes(("b", b) for b in range(5)), block_tokens=_BLOCK
        ),
        TraceRequest(
            "r1", 1.0, 160, 200, shared + chain_hashes(("c", b) for b in range(5)), block_tokens=_BLOCK
        ),
    ]
    engine = Engine(LLAMA_8B_H100, EngineConfig(block_tokens=_BLOCK, kv_capacity_tokens=600))
    outcomes = {o.request.id: o for o in replay(trace, {"b": engine}, _SendAll())}  # type: ignore[arg-type]
    assert any(o.preemptions for o in outcomes.values())
    assert [outcomes[i].cached_tokens for i in ("first", "r0", "r1")] == [0, 80, 80]
    assert engine.metrics()["vllm:prefix_cache_hits"] == 160.0


def test_the_http_usage_of_a_preempted_request_reports_no_cached_tokens() -> None:
    """Review R83: over HTTP the preempted request's usage said 144 of 160 prompt tokens were
    cached (the figure a client is billed from). The second request is sent once the first is
    decoding (its first token streamed), so that both hold KV and the newer one is preempted."""

    async def both(url: str) -> list[int]:
        def body(digit: str, max_tokens: int, stream: bool) -> dict[str, object]:
            options = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
            messages = [{"role": "user", "content": digit * 630}]
            return {"messages": messages, "max_tokens": max_tokens, **options}

        async with (
            _http.AsyncClient(base_url=url, timeout=30) as http,
            http.stream("POST", "/v1/chat/completions", json=body("0", 400, True)) as first,
        ):
            lines = first.aiter_lines()
            async for line in lines:
                if line.startswith("data: "):
                    break  # the first is decoding
            second = await http.post("/v1/chat/completions", json=body("1", 200, False))
            chunks = [json.loads(line[6:]) for line in [x async for x in lines] if line[6:7] == "{"]
        usage = [c["usage"] for c in chunks if c.get("usage")]
        return [u["prompt_tokens_details"]["cached_tokens"] for u in (*usage, second.json()["usage"])]

    with SimServer(LLAMA_8B_H100, EngineConfig(kv_capacity_tokens=600), time_scale=0.2) as sim:
        assert asyncio.run(both(sim.url)) == [0, 0]
        assert sim.engine.preemptions >= 1
        assert sim.engine.metrics()["vllm:prefix_cache_hits"] == 0.0
