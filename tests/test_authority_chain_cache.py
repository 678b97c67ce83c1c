"""The verified-chain cache is bounded in the memory its parsed chains hold, not in
their tokens' bytes, which underestimate it up to 20-fold."""

from __future__ import annotations

import gc
import time
import tracemalloc

import pytest

from agentgate.authority import ChainCache, chain_weight, delegate, issue, parse_chain
from agentgate.keys import SigningKey

ROOT = SigningKey.generate()
# Many constrained capabilities: the shape that takes the most memory per token byte.
CAPS = [f"tool:t{i:02d}.x?" + "&".join(f"a{j}<={j}" for j in range(12)) for i in range(16)]


def _constrained_chain(links: int = 4) -> str:
    keys = [SigningKey.generate() for _ in range(links)]
    now = time.time()  # one instant for every link: each expires a second before its parent
    chain = issue(ROOT, keys[0].did, CAPS, ttl=3600, max_depth=links, now=now)
    for i in range(1, links):
        chain = delegate(chain, keys[i - 1], keys[i].did, CAPS, ttl=3000 - i, now=now)
    return chain.token


@pytest.fixture(scope="module")
def tokens() -> list[str]:
    return [_constrained_chain() for _ in range(8)]


def test_the_weight_of_a_chain_covers_the_memory_its_parsed_form_holds(tokens: list[str]) -> None:
    gc.collect()
    tracemalloc.start()
    try:
        chains = [parse_chain(t) for t in tokens]
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    weight = sum(chain_weight(t, c) for t, c in zip(tokens, chains, strict=True))
    assert held <= weight
    assert weight <= 3 * held  # an estimate, not a multiple of it
    assert held > 5 * sum(map(len, tokens))  # the token's length alone is far below


def test_a_cache_keeps_constrained_chains_within_its_memory_bound(tokens: list[str]) -> None:
    anchors = frozenset({ROOT.did})
    chains = [parse_chain(t) for t in tokens]
    bound = 2 * chain_weight(tokens[0], chains[0]) + 1
    cache = ChainCache(size=100, max_bytes=bound)
    for token, chain in zip(tokens, chains, strict=True):
        cache.put(anchors, token, chain)
    kept = [t for t in tokens if cache.get(anchors, t) is not None]
    assert kept == tokens[-2:]  # the oldest went first
    assert sum(chain_weight(t, cache.get(anchors, t)) for t in kept) <= bound  # type: ignore[arg-type]


def test_a_chain_heavier_than_the_whole_bound_is_not_kept(tokens: list[str]) -> None:
    anchors = frozenset({ROOT.did})
    chain = parse_chain(tokens[0])
    cache = ChainCache(size=100, max_bytes=chain_weight(tokens[0], chain) - 1)
    cache.put(anchors, tokens[0], chain)
    assert cache.get(anchors, tokens[0]) is None
