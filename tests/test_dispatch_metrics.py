"""Engine metrics: each engine's real names read into one shape; garbage is a failed backend."""

from __future__ import annotations

import pytest

from agentgate.dispatch.metrics import MAX_METRICS_CHARS, load_from_text, load_from_values
from agentgate.errors import BackendFailed

VLLM = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.3
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="27500"} 1.0
"""


def test_vllm_metrics_are_read_with_their_real_names() -> None:
    load = load_from_text(VLLM, "vllm", now=7.0)
    assert (load.running, load.waiting) == (5.0, 4.0)  # summed over data-parallel engines
    assert load.kv_usage == pytest.approx(0.4)  # averaged
    assert (load.prefix_queries, load.prefix_hits) == (1000.0, 250.0)
    assert load.kv_capacity_tokens == 16 * 27500
    assert load.scraped_at == 7.0


@pytest.mark.parametrize(
    ("engine", "text", "running", "waiting", "kv"),
    [
        (
            "sglang",
            "sglang:num_running_reqs 7\nsglang:num_queue_reqs 2\nsglang:token_usage 0.25\n",
            7,
            2,
            0.25,
        ),
        ("tgi", "tgi_batch_current_size 9\ntgi_queue_size 1\n", 9, 1, None),
        ("llamacpp", "llamacpp:requests_processing 1\nllamacpp:requests_deferred 3\n", 1, 3, None),
    ],
)
def test_other_engines_metric_names(
    engine: str, text: str, running: float, waiting: float, kv: float | None
) -> None:
    load = load_from_text(text, engine)  # type: ignore[arg-type]
    assert (load.running, load.waiting, load.kv_usage) == (running, waiting, kv)


@pytest.mark.parametrize(
    "text",
    [
        "\x00\xff not prometheus {{{",
        "vllm:num_requests_running{engine=0 3\n",
        "some_other_metric 1\n",
        "vllm:num_requests_running NaN\n",
        "vllm:num_requests_running -4\n",
    ],
)
def test_garbage_metrics_raise_backend_failed(text: str) -> None:
    with pytest.raises(BackendFailed):
        load_from_text(text, "vllm")


def test_simulator_values_use_the_same_mapping() -> None:
    load = load_from_values({"vllm:num_requests_running": 1.0, "vllm:num_requests_waiting": 0.0}, "vllm")
    assert load.running == 1.0 and load.kv_usage is None


def test_only_the_engines_own_lines_are_parsed() -> None:
    """Review R9: the scrape runs on the dispatcher's event loop, and every line of the answer was
    parsed: 200,000 other series (5.5 MB) took 8.3 s of that loop on the development machine,
    every scrape interval (0.1 s now). Other series and comments are skipped unparsed, so a
    malformed line of another series no longer fails the scrape; one of the engine's does."""
    others = "".join(f'other_metric_{i}{{a="b"}} {i}\n' for i in range(200_000))
    load = load_from_text(VLLM + others + "# HELP bad {{{ not a line\nbroken{ 1\n", "vllm")
    assert (load.running, load.waiting, load.kv_capacity_tokens) == (5.0, 4.0, 16 * 27500)
    assert (load.prefix_queries, load.prefix_hits) == (1000.0, 250.0)
    with pytest.raises(BackendFailed, match="not Prometheus text"):
        load_from_text(VLLM + "vllm:num_requests_waiting{engine= 1\n", "vllm")


def test_a_metrics_answer_over_the_limit_is_a_failed_scrape() -> None:
    padding = "# " + "x" * MAX_METRICS_CHARS + "\n"
    with pytest.raises(BackendFailed, match="over"):
        load_from_text(VLLM + padding, "vllm")
