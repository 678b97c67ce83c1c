"""The simulated engine: batching, prefix reuse, eviction, preemption, and the calibration targets."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.sim import (
    LLAMA_8B_H100,
    LLAMA_8B_H200,
    QWEN3_32B,
    Engine,
    EngineConfig,
    KVCache,
    Send,
    SimRequest,
    chain_hashes,
    load_trace,
    replay,
)
from agentgate.sim.traces import TraceRequest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MOONCAKE = SHARED / "data" / "traces" / "mooncake_conversation_trace.jsonl"


def run(engine: Engine, now: float = 0.0) -> float:
    while engine.has_work():
        now += engine.step(now).duration
    return now


def test_calibration_matches_the_published_figures() -> None:
    # NIM Llama-3.1-8B: TTFT ~10 ms at concurrency 1 (short prompt), decode 4.6 ms at 1, 7.6 ms at 100.
    assert LLAMA_8B_H100.prefill_time(180) == pytest.approx(0.010, rel=0.1)
    assert LLAMA_8B_H100.step_time(1, 300, 0, 0) == pytest.approx(0.0046, rel=0.05)
    assert LLAMA_8B_H100.step_time(100, 100 * 300, 0, 0) == pytest.approx(0.0076, rel=0.05)
    # weight-bandwidth bound decode: 4.8 ms on H100, 3.3 ms on H200
    assert LLAMA_8B_H200.base_s == pytest.approx(0.0033, rel=0.05)
    # Qwen3-32B, 10k-token prompt: 4.3 s uncached; far less with most of it cached
    assert QWEN3_32B.prefill_time(10_000) == pytest.approx(4.3, rel=0.05)
    assert QWEN3_32B.prefill_time(1_350, 8_650) == pytest.approx(0.6, rel=0.1)


def test_engine_decode_time_per_token_tracks_the_model() -> None:
    engine = Engine(LLAMA_8B_H100)
    engine.add(SimRequest("a", 100, 101))
    end = run(engine)
    # one prefill step then 100 decode steps of ~4.6 ms
    assert end == pytest.approx(LLAMA_8B_H100.prefill_time(100) + 100 * 0.0046, rel=0.05)


def test_chunked_prefill_respects_the_token_budget() -> None:
    engine = Engine(LLAMA_8B_H100, EngineConfig(max_num_batched_tokens=512))
    engine.add(SimRequest("long", 2000, 2))
    steps = 0
    now = 0.0
    while engine.running or engine.waiting:
        result = engine.step(now)
        now += result.duration
        steps += 1
        if result.first_token:
            break
    assert steps == 4  # 2000 tokens in chunks of at most 512


def test_shared_prefix_is_reused_and_counted() -> None:
    engine = Engine(LLAMA_8B_H100, EngineConfig(block_tokens=16))
    hashes = chain_hashes(range(10))
    engine.add(SimRequest("first", 160, 2, hashes))
    run(engine)
    second = SimRequest("second", 160, 2, hashes)
    engine.add(second)
    run(engine)
    assert second.cached_tokens == 144  # 9 full blocks; the last token is always recomputed
    assert engine.prefix_hits == 144
    assert engine.prefix_queries == 320


def test_kv_cache_evicts_least_recently_used_unreferenced_blocks() -> None:
    kv = KVCache(capacity_tokens=64, block_tokens=16)
    assert kv.allocate(32)
    held = kv.promote([1, 2])
    kv.release(held)
    assert kv.match([1, 2]) == 2 and kv.usage == 0
    assert kv.allocate(48)  # needs one cached block back: the tail (2) goes first
    assert kv.match([1]) == 1 and kv.match([1, 2]) == 1
    assert not kv.allocate(32)


def test_full_cache_preempts_the_newest_request_and_recomputes_it() -> None:
    engine = Engine(LLAMA_8B_H100, EngineConfig(kv_capacity_tokens=1000, block_tokens=16))
    engine.add(SimRequest("old", 400, 300))
    engine.add(SimRequest("new", 400, 300))
    run(engine)
    assert engine.preemptions >= 1
    assert engine.kv.used_tokens == 0


def test_aborting_frees_the_kv_it_held() -> None:
    engine = Engine(LLAMA_8B_H100)
    engine.add(SimRequest("a", 1000, 50))
    engine.step(0.0)
    assert engine.kv.used_tokens > 0
    assert engine.abort("a")
    assert engine.kv.used_tokens == 0 and not engine.has_work()


class _FirstBackend:
    def route(self, request: TraceRequest, now: float) -> Send:
        return Send("b0")

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def observe(self, backend: str, metrics: object, now: float) -> None: ...


def test_replay_is_deterministic_and_serves_every_request() -> None:
    trace = load_trace(MOONCAKE, limit=60)

    def once() -> list[tuple[float | None, float | None]]:
        engines = {"b0": Engine(LLAMA_8B_H200, EngineConfig(block_tokens=512))}
        out = replay(trace, engines, _FirstBackend())  # type: ignore[arg-type]
        return [(o.first_token_at, o.finished_at) for o in out]

    first = once()
    assert first == once()
    assert all(t is not None and f is not None and f >= t for t, f in first)


def test_trace_loaders_read_both_formats() -> None:
    mooncake = load_trace(MOONCAKE, limit=5)
    assert mooncake[0].arrival == 0 and len(mooncake[0].hashes) == 14
    assert mooncake[0].hashes[0] == mooncake[1].hashes[0]  # every request shares block 0
    azure = load_trace(SHARED / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv", limit=5)
    assert [r.prompt_tokens for r in azure[:2]] == [374, 396]
    assert azure[1].arrival == pytest.approx(4.3146, abs=1e-3)


def test_malformed_trace_row_names_file_and_line(tmp_path: Path) -> None:
    from agentgate.errors import InputError

    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n{"oops": 1}\n')
    with pytest.raises(InputError, match=r"t.jsonl:2"):
        load_trace(bad)


def test_decode_run_matches_single_steps() -> None:
    def build() -> Engine:
        engine = Engine(LLAMA_8B_H100)
        for i in range(3):
            engine.add(SimRequest(f"r{i}", 64, 40 + i))
        engine.step(0.0)  # prefill all three
        return engine

    stepped, fast = build(), build()
    t_step = 0.0
    while True:
        result = stepped.step(t_step)
        t_step += result.duration
        if result.finished:
            break
    run_result = fast.decode_run(0.0, until=float("inf"))
    assert run_result is not None
    assert [r.id for r in run_result.finished] == [r.id for r in result.finished] == ["r0"]
    assert run_result.duration == pytest.approx(t_step, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3000), st.integers(1, 60), st.integers(0, 3), st.integers(0, 2)),
        min_size=1,
        max_size=25,
    )
)
def test_kv_accounting_never_overflows_and_everything_is_released(
    specs: list[tuple[int, int, int, int]],
) -> None:
    engine = Engine(
        LLAMA_8B_H100, EngineConfig(kv_capacity_tokens=4096, block_tokens=16, max_num_batched_tokens=512)
    )
    now = 0.0
    for i, (prompt, output, family, delay) in enumerate(specs):
        prompt = min(prompt, 4000)
        engine.add(
            SimRequest(f"r{i}", prompt, output, chain_hashes((family, b) for b in range(prompt // 16)))
        )
        for _ in range(delay):
            if engine.has_work():
                now += engine.step(now).duration
            assert 0 <= engine.kv.used_tokens <= engine.kv.capacity
            assert engine.kv.free_tokens >= 0
    steps = 0
    while engine.has_work() and steps < 20_000:
        now += engine.step(now).duration
        steps += 1
        assert 0 <= engine.kv.used_tokens <= engine.kv.capacity
    assert not engine.has_work()
    assert engine.kv.used_tokens == 0
