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


def test_llamacpp_kv_usage_of_two_slots_is_averaged_not_summed() -> None:
    """Kills: ``load_from_text`` summing ``llamacpp:kv_cache_usage_ratio`` over its label sets
    (``ratio`` left out of the averaged names: two half-full caches read as one full server).
    Rule: a KV usage fraction is the mean over the series, never their sum."""
    text = (
        'llamacpp:requests_processing{slot="0"} 1\n'
        'llamacpp:requests_processing{slot="1"} 1\n'
        'llamacpp:kv_cache_usage_ratio{slot="0"} 0.25\n'
        'llamacpp:kv_cache_usage_ratio{slot="1"} 0.35\n'
    )
    load = load_from_text(text, "llamacpp")
    assert load.kv_usage == pytest.approx(0.3)
    assert load.running == 2.0


async def test_a_kv_usage_over_one_reads_as_full_not_more() -> None:
    """Kills: ``load_from_values`` dropping the clamp ``min(kv, 1.0)``. Rule: KV usage is a
    fraction, 0..1: a backend reporting over 1 is full, and no more than full."""
    assert (
        load_from_text("vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 1.7\n", "vllm").kv_usage == 1.0
    )


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_a_load_that_is_not_a_finite_number_is_a_failed_scrape(value: str) -> None:
    """Kills: ``pick`` checking only ``value < 0`` (NaN and +Inf pass it: a backend whose queue
    reads NaN compares as never full). Rule: a metric value is finite and non-negative."""
    with pytest.raises(BackendFailed, match="impossible"):
        load_from_text(f"vllm:num_requests_running 1\nvllm:num_requests_waiting {value}\n", "vllm")


@pytest.mark.parametrize(
    ("engine", "text", "expected"),
    [
        pytest.param("tgi", "tgi_batch_current_size 3\ntgi_queue_size 40\n", (3.0, 40.0, None), id="tgi"),
        pytest.param(
            "llamacpp",
            "llamacpp:requests_processing 2\nllamacpp:requests_deferred 9\nllamacpp:kv_cache_usage_ratio 0.5\n",
            (2.0, 9.0, 0.5),
            id="llamacpp",
        ),
        pytest.param(
            "vllm",
            "vllm:num_requests_running 1\nvllm:num_requests_waiting 7\nvllm:gpu_cache_usage_perc 0.9\n",
            (1.0, 7.0, 0.9),
            id="vllm-before-0.9",
        ),
    ],
)
def test_each_engines_queue_and_kv_usage_are_read_under_its_own_names(
    engine: str, text: str, expected: tuple[float, float, float | None]
) -> None:
    """Kills: a wrong waiting-metric name for TGI or llama.cpp, and vLLM's pre-0.9 names
    (``_FALLBACKS``) not read (a backend with a long queue, or a nearly full cache, read as
    idle). Rule: each engine's queue and KV usage are read under the names it publishes."""
    load = load_from_text(text, engine)  # type: ignore[arg-type]
    assert (load.running, load.waiting, load.kv_usage) == expected


def test_prefix_counters_are_read_from_their_total_samples_and_capacity_once() -> None:
    """Kills: ``parse_samples`` not filing ``*_total`` samples under the counter's name, and the KV
    capacity summed over a data-parallel server's ``cache_config_info`` samples. Rule: vLLM's
    ``prefix_cache_queries_total`` is the prefix query counter; the capacity is one sample's."""
    text = (
        "# TYPE vllm:prefix_cache_queries counter\n"
        "vllm:prefix_cache_queries_total 1000\n"
        "# TYPE vllm:prefix_cache_hits counter\n"
        "vllm:prefix_cache_hits_total 250\n"
        'vllm:num_requests_running{engine="0"} 1\n'
        'vllm:num_requests_running{engine="1"} 2\n'
        'vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="2000"} 1\n'
        'vllm:cache_config_info{engine="1",block_size="16",num_gpu_blocks="2000"} 1\n'
    )
    load = load_from_text(text, "vllm")
    assert (load.prefix_queries, load.prefix_hits) == (1000.0, 250.0)
    assert load.running == 3.0
    assert load.kv_capacity_tokens == 32000


def test_a_negative_block_count_in_cache_config_info_is_a_failed_scrape() -> None:
    """Kills: ``_kv_capacity`` checking only ``block_size`` for a negative value (a negative
    ``num_gpu_blocks`` made a negative capacity that sized the prefix index). Rule: a negative
    size in ``vllm:cache_config_info`` is garbage: BackendFailed."""
    text = 'vllm:num_requests_running 1\nvllm:cache_config_info{block_size="16",num_gpu_blocks="-100"} 1\n'
    with pytest.raises(BackendFailed, match="negative"):
        load_from_text(text, "vllm")


def test_a_huge_waiting_count_is_garbage_not_a_load() -> None:
    """Kills: the ``MAX_REQUESTS`` bound checked for the running count only. Rule: a waiting
    count over 10**7 is garbage (BackendFailed), whichever series carries it."""
    with pytest.raises(BackendFailed, match="requests"):
        load_from_text("vllm:num_requests_running 1\nvllm:num_requests_waiting 1e12\n", "vllm")


def test_kv_usage_alone_is_not_a_load_report() -> None:
    """Kills: ``load_from_values`` accepting a page with KV usage but neither running nor waiting
    count (an engine's queue unknown, read as empty). Rule: an engine that publishes request
    counts and published neither failed its scrape."""
    with pytest.raises(BackendFailed, match="none of"):
        load_from_text("vllm:kv_cache_usage_perc 0.99\n", "vllm")


@pytest.mark.parametrize(
    "text",
    [
        'vllm:num_requests_running{engine="0"} -5\nvllm:num_requests_running{engine="1"} 7\n',
        'vllm:num_requests_running 1\nvllm:kv_cache_usage_perc{engine="0"} -0.8\n'
        'vllm:kv_cache_usage_perc{engine="1"} 0.9\n',
        'vllm:num_requests_running 1\nvllm:prefix_cache_hits_total{engine="0"} -100\n'
        'vllm:prefix_cache_hits_total{engine="1"} 150\n',
    ],
    ids=["running", "kv-usage", "prefix-hits"],
)
def test_a_negative_sample_hidden_in_a_sum_or_mean_is_a_failed_scrape(text: str) -> None:
    """Kills: ``load_from_text`` checking the values only once summed (or averaged) over their
    label sets: a data-parallel server's engines reporting -5 and 7 running read as 2, a KV
    usage of -0.8 and 0.9 as 0.05, so garbage passed for a load that ``pick`` would have refused
    from one engine. Rule: every sample of a series read is finite and non-negative, or the
    scrape fails."""
    with pytest.raises(BackendFailed, match="impossible"):
        load_from_text(text, "vllm")
