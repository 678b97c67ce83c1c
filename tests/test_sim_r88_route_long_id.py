"""Review R88: ``PolicyDispatcher.route`` wrote a request's whole id (and the router's whole name)
into the ``InputError`` for hashes of other blocks than the router's: a 1 MB id gave a 1 MB
message. Each is now quoted as ``quoted`` does, cut at 60 characters."""

from __future__ import annotations

import pytest

from agentgate.dispatch.baselines import RoundRobinRouter
from agentgate.dispatch.inventory import inventory_from_mapping
from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, TraceRequest, replay
from agentgate.sim.routing import PolicyDispatcher


def test_a_long_request_id_is_cut_in_the_block_size_refusal() -> None:
    inv = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://x", "engine": "vllm", "models": ["m"]}]}
    )
    request = TraceRequest(
        id="x" * 1_000_000, arrival=0.0, prompt_tokens=20, output_tokens=2, hashes=(1,), block_tokens=512
    )
    engines = {"b0": Engine(LLAMA_8B_H100, EngineConfig(block_tokens=512))}
    with pytest.raises(InputError) as refused:
        replay([request], engines, PolicyDispatcher(RoundRobinRouter(inv, block_tokens=16), "m"))
    said = str(refused.value)
    assert len(said) < 400, len(said)
    assert said.startswith("request 'xxxxxxxx") and "...: its hashes are of 512-token blocks" in said
    assert "blocks of 16 tokens (make it with block_tokens=512)" in said
