"""The prefix index (agentgate/dispatch/prefix_index.py) against what real engines keep and report.

- Past its capacity, or once shrunk to the engine's reported cache, the index evicts a prompt's
  tail before its head, as vLLM frees a request's blocks tail first (and SGLang's radix tree
  evicts leaves); a match counts the leading blocks only.
- The engine's hit rate corrects the index's confidence to the engine's share of what the index
  matched (not its square root: the rate compared is the index's own, undiscounted).
- vLLM before 0.9.2 publishes its prefix counters as ``vllm:gpu_prefix_cache_*``; they are read too.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import _http
import pytest

from agentgate.dispatch import inventory_from_mapping, prefix_index
from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.metrics import EngineLoad, load_from_text
from agentgate.dispatch.prefix_index import PrefixIndex
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.sim._kvcache import KVCache

BLOCK = 16
MODEL = "m"


def _inventory(
    *names: str, kv_capacity_tokens: int | None = None, url: str = "http://127.0.0.1:9"
) -> Inventory:
    extra = {} if kv_capacity_tokens is None else {"kv_capacity_tokens": kv_capacity_tokens}
    return inventory_from_mapping(
        {
            "backends": [
                {"name": name, "url": f"{url}/{name}", "engine": "vllm", "models": [MODEL], **extra}
                for name in names
            ]
        }
    )


def _serve_on(cache: KVCache, hashes: list[int]) -> None:
    """Run one request through the simulated engine's cache, as its engine does: reuse the cached
    prefix, compute the rest, then release every block when the request ends."""
    hit = cache.match(hashes)
    cache.acquire(hashes[:hit])
    assert cache.allocate((len(hashes) - hit) * BLOCK)
    cache.release(hashes[:hit] + cache.promote(hashes[hit:]))


def test_the_index_keeps_the_prefix_the_engine_keeps_when_a_prompt_is_pushed_out() -> None:
    """An 8-block cache: a 6-block prompt, then a 3-block one, push one block out. The engine
    (vLLM's order, as the simulator keeps it) loses the first prompt's last block; the index lost
    its first one, and with it the whole prefix."""
    engine, index = KVCache(8 * BLOCK, BLOCK), PrefixIndex(8)
    first, other = [1, 2, 3, 4, 5, 6], [11, 12, 13]
    for hashes in (first, other):
        _serve_on(engine, hashes)
        index.record(hashes)
    assert engine.match(first) == 5
    assert index.match(first) == engine.match(first)
    assert index.match(other) == engine.match(other) == 3


def test_a_follow_up_goes_back_to_the_backend_that_still_holds_its_prefix() -> None:
    """The router-level effect: after another prompt evicted a block there, the conversation's
    next turn is still predicted (and routed) to hit its prefix on the backend that served it."""
    router = Router(_inventory("b0", "b1", kv_capacity_tokens=8 * BLOCK), block_tokens=BLOCK)
    turn = tuple(range(1, 7))
    for i, hashes in enumerate((turn, (11, 12, 13))):
        request = RouteRequest(
            id=f"r{i}",
            model=MODEL,
            prompt_tokens=len(hashes) * BLOCK,
            max_output_tokens=4,
            prefix_hashes=hashes,
        )
        assert router.route(request, 0.0, allowed=lambda b: b.name == "b0").backend == "b0"
        router.finished(request.id, 0.0)
    follow_up = (*turn, 7)
    assert router.states["b0"].cached_tokens(follow_up, 7 * BLOCK + 4) == 5 * BLOCK
    plan = router.route(
        RouteRequest(
            id="next", model=MODEL, prompt_tokens=7 * BLOCK + 4, max_output_tokens=4, prefix_hashes=follow_up
        ),
        0.0,
    )
    assert (plan.backend, plan.cached_tokens) == ("b0", 5 * BLOCK)


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_the_engines_hit_rate_discounts_the_index_to_the_engines_share(share: float) -> None:
    """The index matches the whole prompt each time; the engine reports hitting ``share`` of the
    prompt. The router's predicted cached tokens settle at the engine's, not at the square root of
    its share (800 of 1,600 tokens, where the engine hit 400)."""
    router = Router(_inventory("b"), block_tokens=BLOCK)
    prompt, hashes = 100 * BLOCK, tuple(range(1, 101))
    queries = hits = 0.0
    router.observe("b", EngineLoad(running=0, waiting=0, prefix_queries=0.0, prefix_hits=0.0))
    for i in range(150):
        request = RouteRequest(
            id=f"r{i}",
            model=MODEL,
            prompt_tokens=prompt,
            max_output_tokens=4,
            prefix_hashes=hashes,
            arrived_at=i,
        )
        assert router.route(request, float(i)).action == "dispatch"
        router.finished(request.id, float(i))
        if i:  # the first call filled the index: a miss on both sides
            queries, hits = queries + prompt, hits + share * prompt
            router.observe(
                "b", EngineLoad(running=0, waiting=0, prefix_queries=queries, prefix_hits=hits, scraped_at=i)
            )
    assert router.states["b"].cached_tokens(hashes, prompt) == pytest.approx(share * prompt, rel=0.03)


VLLM_BEFORE_0_9_2 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
# HELP vllm:gpu_prefix_cache_queries_total GPU prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 3200.0
# HELP vllm:gpu_prefix_cache_hits_total GPU prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 800.0
"""


def test_the_prefix_counters_of_vllm_before_0_9_2_are_read() -> None:
    load = load_from_text(VLLM_BEFORE_0_9_2, "vllm")
    assert (load.running, load.waiting, load.kv_usage) == (2.0, 1.0, 0.5)
    assert (load.prefix_queries, load.prefix_hits) == (3200.0, 800.0)


def test_the_current_prefix_counters_win_where_an_engine_publishes_both_names() -> None:
    both = VLLM_BEFORE_0_9_2 + (
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0\n'
    )
    load = load_from_text(both, "vllm")
    assert (load.prefix_queries, load.prefix_hits) == (100.0, 10.0)


@pytest.fixture
def old_vllm_metrics() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving ``VLLM_BEFORE_0_9_2`` on ``/metrics``; its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = VLLM_BEFORE_0_9_2.encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5.0)


async def test_a_scrape_of_vllm_before_0_9_2_carries_its_prefix_counters(old_vllm_metrics: str) -> None:
    backend = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "old",
                    "url": old_vllm_metrics,
                    "engine": "vllm",
                    "models": [MODEL],
                    "metrics_url": old_vllm_metrics + "/metrics",
                }
            ]
        }
    ).backends[0]
    async with _http.AsyncClient() as http_client:
        load = await BackendClient(backend, http_client, Timeouts(probe_s=5.0)).scrape(1.0)
    assert (load.prefix_queries, load.prefix_hits, load.scraped_at) == (3200.0, 800.0, 1.0)


def test_the_index_evicts_a_prompts_tail_before_its_head() -> None:
    """Kills: ``PrefixIndex.record`` inserting blocks head first (the head made the oldest, so
    eviction lost the whole prefix while the engine still held it). Rule: past capacity, the
    tail of a prompt goes first and its head still matches."""
    index = PrefixIndex(3)
    index.record([1, 2, 3, 4])
    assert index.match([1, 2, 3, 4]) == 3


def test_a_shrunk_index_evicts_down_to_its_new_capacity() -> None:
    """Kills: ``PrefixIndex.resize`` setting the capacity without evicting. Rule: once the engine
    reports a smaller cache, the index believes no more blocks cached than fit there."""
    index = PrefixIndex(10)
    index.record(list(range(1, 9)))
    index.resize(2)
    assert len(index) == 2
    assert index.match(list(range(1, 9))) == 2


def test_a_match_stops_at_the_first_missing_block() -> None:
    """Kills: ``PrefixIndex.match`` skipping a missing block (counting blocks after a miss that a
    chained cache can never hit). Rule: matches count the leading blocks only."""
    index = PrefixIndex(10)
    index.record([1, 2, 3])
    assert index.match([1, 9, 3]) == 1


def test_confidence_settles_at_the_engines_share_of_the_index_matches() -> None:
    """Kills: ``PrefixIndex.calibrate`` taking the discounted prediction for the index's own rate
    (``confidence`` left out of the ratio: it settles at the square root of the engine's share,
    0.5 where the engine hits a quarter of what the index matched, over-crediting cache locality).
    Rule: with the engine hitting a quarter of the index's matches, confidence settles at 0.25."""
    index = PrefixIndex(10)
    own, engine = 0.8, 0.2
    for _ in range(200):
        index.calibrate(index.confidence * own, engine)
    assert index.confidence == pytest.approx(0.25, abs=1e-3)


def test_the_index_holds_at_most_max_blocks_whatever_capacity_a_backend_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R56: the index was sized to any capacity up to 10**12 KV tokens (the inventory's
    bound, and a scrape's), 6.25e10 blocks, so a backend that declared or published such a cache
    had the router keep every block it was ever sent (about 140 bytes each): memory without bound.

    Rule: an index holds at most ``MAX_BLOCKS`` blocks, whether sized by the inventory or by the
    engine's published cache size, evicting as it does at its capacity."""
    monkeypatch.setattr(prefix_index, "MAX_BLOCKS", 64)
    router = Router(_inventory("a", kv_capacity_tokens=10**12), block_tokens=BLOCK)
    index = router.states["a"].index
    index.record(tuple(range(1000)))
    assert len(index) == index.capacity_blocks == 64
    published = Router(_inventory("b"), block_tokens=BLOCK).states["b"]
    published.observe(EngineLoad(running=0.0, waiting=0.0, kv_capacity_tokens=10**12, scraped_at=0.0))
    published.index.record(tuple(range(1000)))
    assert len(published.index) == published.index.capacity_blocks == 64
    assert index.match(tuple(range(64))) == 64  # the newest (the prompt's head) kept
