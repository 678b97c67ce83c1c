"""Review R88c: benchmarks/dispatch.py's TTFT floor counted a 0-token prompt (which ``load_trace``
takes) as having -1 cached tokens, and ``prefill_time``'s check of its counts (added in R88)
ended the whole run with a traceback after every replay had run. Such a prompt now counts
nothing cached and a prefill of 0 tokens."""

from __future__ import annotations

from test_benchmarks_r57_contract import _load

from agentgate.sim.traces import TraceRequest, chain_hashes

BENCH = _load("dispatch")


def test_a_zero_token_prompt_counts_nothing_cached_in_the_floor() -> None:
    model = BENCH.MODEL
    empty = TraceRequest(id="r0", arrival=0.0, prompt_tokens=0, output_tokens=5)
    assert BENCH.ttft_floor_p99([empty], model) == model.prefill_time(0, 0)


def test_the_floor_of_a_trace_with_a_zero_token_prompt_is_that_of_its_other_requests() -> None:
    model = BENCH.MODEL
    long = TraceRequest(
        id="r1",
        arrival=1.0,
        prompt_tokens=2048,
        output_tokens=5,
        hashes=chain_hashes(range(4)),
        block_tokens=512,
    )
    empty = TraceRequest(id="r2", arrival=2.0, prompt_tokens=0, output_tokens=5)
    floor = BENCH.ttft_floor_p99([long, empty], model)
    assert model.prefill_time(0, 0) <= floor <= model.prefill_time(2048, 0)
