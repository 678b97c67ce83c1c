"""The verified-chain cache is bounded in the memory its parsed chains hold, not in
their tokens' bytes, which underestimate it up to 20-fold."""

from __future__ import annotations

import gc
import time
import tracemalloc
from pathlib import Path

import pytest

from agentgate.authority import (
    Authority,
    ChainCache,
    GrantRepository,
    Invocation,
    chain_weight,
    decide,
    delegate,
    issue,
    parse_chain,
)
from agentgate.authority._chain_findings import chain_finding
from agentgate.authority._signatures import _anchors
from agentgate.capabilities import Call, Capability, covers
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

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


@pytest.mark.parametrize("size", ["100", None, 1.5, float("nan"), 0, -1, True])
def test_a_cache_size_that_is_not_a_whole_number_is_refused_when_configured(
    tmp_path: Path, size: object
) -> None:
    """Review R56: Authority(cache_size="100") (or None) was taken, and the decision that cached
    a second chain raised TypeError ('>=' not supported); a NaN never evicted (every comparison
    is false), 1.5 kept one chain. Rule: the size (and the memory bound) is a whole number, 1 or
    more, refused with an InputError where the cache is configured."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        with pytest.raises(InputError, match="whole number, 1 or more"):
            Authority(GrantRepository(store), ROOT.public, cache_size=size)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="max_bytes is a whole number"):
            ChainCache(max_bytes=size)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="a ChainCache as its cache"):
            decide(None, repo=GrantRepository(store), trusted=ROOT.public, cache={"a": 1})  # type: ignore[arg-type]
        authority = Authority(GrantRepository(store), ROOT.public, cache_size=1)
        holder = SigningKey.generate()
        call = Call.tool("t00.x")
        for _ in range(2):  # two chains through a cache of one: the second pushes out the first
            chain = issue(ROOT, holder.did, ["tool:t00.x"], ttl=60)
            assert authority.decide(Invocation.sign(holder, chain, call)).allowed
        assert authority.cache.get(authority.anchors, chain.token) is not None
    finally:
        store.close()


def _set_chain(values: list[object]) -> str:
    """A chain of four links, each of the three delegations holding one ``in`` set of ``values``."""
    keys = [SigningKey.generate() for _ in range(4)]
    cap = Capability.from_dict(
        {"resource": "tool:t", "action": "invoke", "constraints": {"a": {"in": values}}}
    )
    chain = issue(ROOT, keys[0].did, ["tool:*#*"], ttl=3600, max_depth=4)
    for i in range(1, 4):
        chain = delegate(chain, keys[i - 1], keys[i].did, [cap], ttl=3000 - i)
    return chain.token


def test_the_weight_of_a_chain_counts_the_values_of_its_sets() -> None:
    """Review R56: chain_weight left out the values of ``in`` sets, so a verified, decided-on
    chain of 1,000-value sets of 1-character strings held about 12 times its weight (392 KB for
    33 KB), and a cache bounded at 64 MiB of weight could hold several hundred MiB. Rule: the
    weight of a chain covers the memory it holds once verified and decided on, sets included."""
    tokens = [
        _set_chain([chr(0x4E00 + v) for v in range(1000)]),  # 1-character strings: the most per value
        _set_chain([chr(0x1F300 + v) for v in range(1000)]),
        _set_chain([f"{v:x}" for v in range(1000)]),
        _set_chain([1000 + v for v in range(1000)]),
    ]
    anchors = _anchors(ROOT.public)
    gc.collect()
    tracemalloc.start()
    try:
        chains = [parse_chain(t) for t in tokens]
        for chain in chains:  # what a cached chain has been through: verification, then decisions
            assert chain_finding(chain, anchors) is None
            for link in chain.links:
                for cap in link.capabilities:
                    for value in ("\u4e00", 1000, "absent"):
                        covers(cap, Call.tool("t", {"a": value}))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held <= sum(chain_weight(t, c) for t, c in zip(tokens, chains, strict=True))
