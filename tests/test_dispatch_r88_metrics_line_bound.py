"""Review R88: a metrics line of a read name longer than ``MAX_METRICS_LINE_CHARS`` is refused.

``prometheus_client`` parses one line in time quadratic in its labels (and in the escaped quotes
of a label value), so one line of 128,000 labels (1.4 MB, far under ``MAX_METRICS_CHARS``) held
the dispatcher's event loop for 15 s. Each line of a name that is parsed is now bounded, which
keeps the whole parse linear in the text; lines of other names are still skipped unparsed.
"""

from __future__ import annotations

import pytest

from agentgate.dispatch.metrics import MAX_METRICS_LINE_CHARS, load_from_text
from agentgate.errors import BackendFailed


def _labelled(name: str, chars: int) -> str:
    """A sample line of ``name`` with value 1 and as many labels as fit in ``chars``."""
    head, tail = name + "{", "} 1"
    labels: list[str] = []
    size = len(head) + len(tail)
    while size + len(f',l{len(labels)}="v"') <= chars:
        labels.append(f'l{len(labels)}="v"')
        size += len(labels[-1]) + (1 if len(labels) > 1 else 0)
    return head + ",".join(labels) + tail


def test_a_read_line_over_the_bound_is_refused_naming_line_and_metric() -> None:
    text = "vllm:num_requests_waiting 0\n" + _labelled(
        "vllm:num_requests_running", MAX_METRICS_LINE_CHARS + 100
    )
    with pytest.raises(BackendFailed) as caught:
        load_from_text(text, "vllm")
    message = str(caught.value)
    assert message.startswith("metrics line 2 (vllm:num_requests_running) is ")
    assert f"over {MAX_METRICS_LINE_CHARS}" in message


def test_escaped_quotes_past_the_bound_are_refused() -> None:
    text = 'vllm:num_requests_running{a="' + '\\"' * MAX_METRICS_LINE_CHARS + '"} 1\n'
    with pytest.raises(BackendFailed, match=r"^metrics line 1 \(vllm:num_requests_running\)"):
        load_from_text(text, "vllm")


def test_a_read_line_at_the_bound_is_still_read() -> None:
    line = _labelled("vllm:num_requests_running", MAX_METRICS_LINE_CHARS)
    assert len(line) <= MAX_METRICS_LINE_CHARS
    assert load_from_text(line + "\nvllm:num_requests_waiting 3\n", "vllm").running == 1.0


def test_a_long_line_of_a_name_not_read_is_skipped() -> None:
    text = (
        _labelled("vllm:e2e_request_latency_seconds_bucket", 4 * MAX_METRICS_LINE_CHARS)
        + "\n# HELP x "
        + "y" * (4 * MAX_METRICS_LINE_CHARS)
        + "\nvllm:num_requests_running 2\n"
    )
    assert load_from_text(text, "vllm").running == 2.0


def test_a_real_vllm_cache_config_line_with_a_long_model_path_is_read() -> None:
    model = "/mnt/models/" + "m" * 4000
    labels = {
        "block_size": "16",
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "engine": "0",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "model_name": model,
        "num_cpu_blocks": "None",
        "num_gpu_blocks": "1000",
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "builtin",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": "4294967296",
    }
    info = "vllm:cache_config_info{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "} 1.0"
    text = f'{info}\nvllm:num_requests_running{{engine="0",model_name="{model}"}} 4.0\n'
    load = load_from_text(text, "vllm")
    assert (load.running, load.kv_capacity_tokens) == (4.0, 16_000)
