"""Review R66 of the simulator's settings: values of the wrong type.

``EngineConfig`` checked that each limit was at least 1, and ``SimServer`` that its numbers were
in range, by comparing them: a value of another type (text, a fraction where a count is meant)
either raised a bare ``TypeError`` from the comparison (``EngineConfig(max_num_seqs="4")``,
``SimServer(time_scale="1")``) or was taken, and ``EngineConfig(block_tokens=2.5)`` then failed
inside the engine's first step (a slice by a float), where the HTTP server's chat requests
failed with a 500 and a traceback in its log.
"""

from __future__ import annotations

from typing import Any

import _http
import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, SimRequest, SimServer


@pytest.mark.parametrize(
    "setting",
    [
        {"block_tokens": 2.5},
        {"max_num_seqs": 2.5},
        {"max_num_batched_tokens": 100.5},
        {"kv_capacity_tokens": 1000.5},
        {"max_num_seqs": "4"},
        {"block_tokens": True},
        {"kv_capacity_tokens": float("inf")},
    ],
    ids=["fractional-block", "fractional-batch", "fractional-budget", "fractional-kv", "text", "bool", "inf"],
)
def test_an_engine_limit_that_is_no_whole_number_is_refused_naming_it(setting: dict[str, Any]) -> None:
    """Review R66: ``EngineConfig(block_tokens=2.5)`` was taken and the engine's first step
    raised ``TypeError`` (slice indices must be integers); ``max_num_seqs="4"`` raised a bare
    ``TypeError`` from the range check; fractions and ``True`` were taken as limits."""
    with pytest.raises(InputError, match=next(iter(setting))):
        EngineConfig(**setting)


def test_whole_number_limits_are_taken_and_schedule() -> None:
    """Review R66 (checked, right already): integer limits, and no KV capacity (the model's)."""
    engine = Engine(LLAMA_8B_H100, EngineConfig(max_num_seqs=2, max_num_batched_tokens=64, block_tokens=4))
    engine.add(SimRequest("a", 40, 3, tuple(range(10))))
    while engine.has_work():
        engine.step(0.0)
    assert engine.kv.capacity == LLAMA_8B_H100.kv_capacity_tokens


@pytest.mark.parametrize(
    "setting",
    [
        {"time_scale": "1"},
        {"time_scale": True},
        {"scrape_lag_s": "0.5"},
        {"max_model_len": "100"},
        {"max_model_len": 2.5},
        {"max_model_len": True},
        {"body_timeout_s": "3"},
    ],
    ids=[
        "text-scale",
        "bool-scale",
        "text-lag",
        "text-len",
        "fractional-len",
        "bool-len",
        "text-body-timeout",
    ],
)
def test_a_server_setting_of_the_wrong_type_is_refused_naming_it(setting: dict[str, Any]) -> None:
    """Review R66: ``SimServer(time_scale="1")`` (and ``scrape_lag_s``, ``max_model_len``,
    ``body_timeout_s`` as text) raised a bare ``TypeError`` from a comparison;
    ``max_model_len=2.5`` was taken (every refusal then said "from 1 to 2.5")."""
    with pytest.raises(InputError, match=next(iter(setting))):
        SimServer(**setting)


def test_a_server_with_whole_number_settings_serves() -> None:
    """Review R66 (checked, right already): an integer ``time_scale`` and ``max_model_len``."""
    with SimServer(time_scale=1, max_model_len=64, scrape_lag_s=0) as server:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        answer = _http.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2
