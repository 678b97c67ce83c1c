"""Review R89: ``ChainCache`` refuses a ``size`` or ``max_bytes`` that is not a whole number, 1 or
more, when it is made (R56), but until R89 both stayed plain attributes: a string assigned later
made the decision that cached a second chain raise ``TypeError`` out of ``Authority.decide``, and a
NaN bounded nothing. Both are read-only now, as ``Authority``'s own fields are since R88: assigning
one raises ``AttributeError`` and the cache keeps to the bounds it checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.authority import Authority, ChainCache, GrantRepository, Invocation, issue
from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()
NOW = 1_800_000_000
CALL = Call.tool("search")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Authority]:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        yield Authority(GrantRepository(store), ROOT.public, cache_size=2)
    finally:
        store.close()


@pytest.mark.parametrize("name", ["size", "max_bytes"])
@pytest.mark.parametrize("value", ["4096", float("nan"), 0, None])
def test_a_chain_caches_checked_bounds_cannot_be_replaced(
    engine: Authority, name: str, value: object
) -> None:
    kept = getattr(engine.cache, name)
    with pytest.raises(AttributeError, match=name):
        setattr(engine.cache, name, value)
    assert getattr(engine.cache, name) == kept
    for _ in range(5):
        chain = issue(ROOT, AGENT.public, ["tool:search"], ttl=3600, now=NOW)
        decision = engine.decide(Invocation.sign(AGENT, chain, CALL, now=NOW), now=NOW)
        assert decision.outcome is Outcome.ALLOW, decision.reasons
    assert len(engine.cache._items) <= 2


def test_a_chain_cache_reads_back_the_bounds_it_was_given() -> None:
    cache = ChainCache(size=3, max_bytes=10_000)
    assert (cache.size, cache.max_bytes) == (3, 10_000)
