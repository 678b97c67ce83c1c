"""Review R90: ``EngineConfig`` and ``LatencyModel`` took any integer of 1 or more as the KV
capacity (and ``EngineConfig`` as the block size), and ``SimServer``'s ``/metrics`` publishes both:
with ``kv_capacity_tokens=10**5000`` every ``GET /metrics`` was a 500 (an integer of more than 4,300
digits has no ``str``), and with ``max_model_len=10**5000`` too, so was the 400 refusing a
``max_tokens`` of 0. Both are now refused above ``MAX_KV_CAPACITY_TOKENS`` (10**12, the most
agentgate's router believes of a published capacity) when they are made."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request

import pytest

from agentgate.dispatch.inventory import MAX_KV_CAPACITY_TOKENS as ROUTER_BELIEVES
from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, EngineConfig, SimServer

_BOUND = 10**12


def test_the_bound_is_what_the_router_believes() -> None:
    from agentgate.sim._latency import MAX_KV_CAPACITY_TOKENS

    assert MAX_KV_CAPACITY_TOKENS == ROUTER_BELIEVES == _BOUND


@pytest.mark.parametrize("name", ["kv_capacity_tokens", "block_tokens"])
@pytest.mark.parametrize("value", [10**12 + 1, 10**5000], ids=["10**12+1", "10**5000"])
def test_an_engine_limit_past_the_bound_is_refused_naming_it(name: str, value: int) -> None:
    with pytest.raises(
        InputError, match=rf"^{name} must be at most 10\*\*12 tokens \(MAX_KV_CAPACITY_TOKENS\), not "
    ):
        EngineConfig(**{name: value})


@pytest.mark.parametrize("value", [10**12 + 1, 10**5000], ids=["10**12+1", "10**5000"])
def test_a_profile_capacity_past_the_bound_is_refused_naming_it(value: int) -> None:
    with pytest.raises(InputError, match=r"kv_capacity_tokens must be an integer from 1 to 10\*\*12"):
        dataclasses.replace(LLAMA_8B_H100, kv_capacity_tokens=value)


def test_a_server_at_the_bound_serves_metrics_and_its_refusals() -> None:
    config = EngineConfig(kv_capacity_tokens=_BOUND)
    with SimServer(LLAMA_8B_H100, config, time_scale=1e-3, max_model_len=10**5000) as server:
        assert server.max_model_len == _BOUND
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as answer:
            assert f'num_gpu_blocks="{_BOUND // 16}"' in answer.read().decode()
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}
        request = urllib.request.Request(
            server.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400
        assert f"from 1 to {_BOUND}" in refused.value.read().decode()
