"""Review R66 of the trace replay: a trace's block hashes read at another block size.

A ``TraceRequest`` says how many tokens each of its ``hashes`` covers (``block_tokens``: 512 for
the Mooncake traces), and each engine cuts prompts into blocks of its own
(``EngineConfig.block_tokens``, 16 by default). ``replay`` handed the trace's hashes to the engine
as they were, so a Mooncake trace replayed on a default engine read each 512-token block as 16
tokens: a prefix shared by two prompts was served as 32 times less cached than it is, and a trace
cut finer than its engine was served as cached far past the prefix its prompts share.
"""

from __future__ import annotations

import pytest
from test_sim_trace_loaders import _SendAll

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.baselines import MooncakeRouter
from agentgate.dispatch.inventory import Inventory
from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, replay
from agentgate.sim.routing import PolicyDispatcher
from agentgate.sim.traces import MOONCAKE_BLOCK_TOKENS, TraceRequest, chain_hashes


def _two_sharing_one_block(block_tokens: int) -> list[TraceRequest]:
    """Two prompts of 1,025 tokens that share their first block only; the second comes later."""
    blocks = -(-1025 // block_tokens)
    return [
        TraceRequest(
            name, at, 1025, 2, chain_hashes(["p", *(f"{name}{i}" for i in range(blocks - 1))]), block_tokens
        )
        for name, at in (("a", 0.0), ("b", 60.0))
    ]


def test_a_shared_block_is_served_cached_in_full_at_the_traces_block_size() -> None:
    """Review R66 (checked, right already): on an engine cut as the trace is, the second prompt
    has its shared block, all 512 tokens of it, from the cache."""
    engines = {"b": Engine(LLAMA_8B_H100, EngineConfig(block_tokens=MOONCAKE_BLOCK_TOKENS))}
    first, second = replay(_two_sharing_one_block(MOONCAKE_BLOCK_TOKENS), engines, _SendAll())  # type: ignore[arg-type]
    assert (first.cached_tokens, second.cached_tokens) == (0, MOONCAKE_BLOCK_TOKENS)


@pytest.mark.parametrize(
    ("trace_block", "engine_block"),
    [(MOONCAKE_BLOCK_TOKENS, 16), (16, MOONCAKE_BLOCK_TOKENS)],
    ids=["mooncake-on-a-default-engine", "finer-trace-on-a-coarser-engine"],
)
def test_a_trace_cut_at_another_block_size_than_its_engine_is_refused(
    trace_block: int, engine_block: int
) -> None:
    """Review R66: the replay served a Mooncake trace on a default engine (16-token blocks) with
    each 512-token shared block cached as 16 tokens (and a 16-token trace on a 512-token engine
    with 512 cached tokens where 16 were shared), and said nothing. It is now refused, naming the
    request, both block sizes and the backend, before anything is replayed."""
    engine = Engine(LLAMA_8B_H100, EngineConfig(block_tokens=engine_block))
    with pytest.raises(InputError, match=rf"'a'.*{trace_block}.*'b'.*{engine_block}"):
        replay(_two_sharing_one_block(trace_block), {"b": engine}, _SendAll())  # type: ignore[arg-type]
    assert not engine.has_work()


def test_a_request_without_hashes_replays_on_any_engine() -> None:
    """Review R66: a request with no block hashes (nothing to read at a block size) is served
    whatever its ``block_tokens`` and its engine's."""
    trace = [TraceRequest("a", 0.0, 100, 5)]  # block_tokens 512 by default
    (outcome,) = replay(trace, {"b": Engine(LLAMA_8B_H100)}, _SendAll())  # type: ignore[arg-type]
    assert outcome.rejected is None and outcome.finished_at is not None


def _one_backend() -> Inventory:
    return inventory_from_mapping(
        {"backends": [{"name": "b", "url": "http://x", "models": ["m"], "kv_capacity_tokens": 900_000}]}
    )


@pytest.mark.parametrize("router_block", [16, 1024])
def test_a_router_cut_at_another_block_size_than_the_trace_is_refused(router_block: int) -> None:
    """Review R66: ``PolicyDispatcher`` handed a trace's hashes to a router cut at another block
    size (the default 16 for a Mooncake trace of 512), which read each as one of its own blocks:
    its prefix-cache predictions were off by that factor, silently. It is now refused, naming
    the request and both sizes, at the first request routed."""
    engines = {"b": Engine(LLAMA_8B_H100, EngineConfig(block_tokens=MOONCAKE_BLOCK_TOKENS))}
    dispatcher = PolicyDispatcher(MooncakeRouter(_one_backend(), block_tokens=router_block), "m")
    with pytest.raises(InputError, match=rf"'a'.*{MOONCAKE_BLOCK_TOKENS}.*{router_block}"):
        replay(_two_sharing_one_block(MOONCAKE_BLOCK_TOKENS), engines, dispatcher)
    assert not engines["b"].has_work()


def test_a_router_cut_as_the_trace_routes_it() -> None:
    """Review R66 (checked, right already): the same router at the trace's block size serves both."""
    engines = {"b": Engine(LLAMA_8B_H100, EngineConfig(block_tokens=MOONCAKE_BLOCK_TOKENS))}
    dispatcher = PolicyDispatcher(MooncakeRouter(_one_backend(), block_tokens=MOONCAKE_BLOCK_TOKENS), "m")
    out = replay(_two_sharing_one_block(MOONCAKE_BLOCK_TOKENS), engines, dispatcher)
    assert [o.rejected for o in out] == [None, None] and out[1].cached_tokens == MOONCAKE_BLOCK_TOKENS
