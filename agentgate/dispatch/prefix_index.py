"""The router's own record of which prompt blocks each backend probably holds in its KV cache.

Engines do not say which prefixes they hold (vLLM publishes only hit counters), so the router
remembers the block hashes of the prompts it sent to each backend, in an LRU sized to the
backend's KV capacity: once more blocks have been sent there than fit, the oldest are assumed
evicted, as the engine's own LRU would. Within one prompt the tail goes first (vLLM frees a
request's blocks tail first, SGLang's radix tree evicts leaves): evicting the head first would
lose the whole prefix, since chained blocks match only from the start, while the engine still
holds it. The engine's measured hit rate corrects the estimate (``confidence``): when the
engine hits less often than the index predicted, the index's matches are discounted.

An index holds at most ``MAX_BLOCKS`` blocks, whatever capacity it is given: the capacity comes
from the inventory or from the engine's published cache size, each believed up to 10**12 tokens
(``inventory.MAX_KV_CAPACITY_TOKENS``), and an index that large kept every block the router ever
sent there.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

MAX_BLOCKS = 2**20
"""The most blocks one index holds (16.8 M tokens at 16 a block, above the largest real engine's
cache: an H200 holds about 0.9 M tokens of Llama 3.1 8B's KV); about 140 bytes each, so at most
about 150 MB of the router's memory per backend."""


class PrefixIndex:
    """LRU set of chained block hashes believed cached on one backend, at most ``MAX_BLOCKS``."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks <= 0:
            raise ValueError("capacity must be positive")
        self.capacity_blocks = min(capacity_blocks, MAX_BLOCKS)
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.confidence = 1.0

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks of ``hashes`` believed cached (chained: stop at the first miss)."""
        n = 0
        for h in hashes:
            if h not in self._blocks:
                break
            n += 1
        return n

    def record(self, hashes: Sequence[int]) -> None:
        """Note that a prompt with these blocks was sent here: they are now the most recent, the
        first block most of all (the tail is evicted first, as the engine does)."""
        for h in reversed(hashes):
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def resize(self, capacity_blocks: int) -> None:
        """Change the capacity (the engine reported its real cache size; at most ``MAX_BLOCKS``),
        evicting if needed."""
        self.capacity_blocks = min(max(1, capacity_blocks), MAX_BLOCKS)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (the backend restarted: its cache is empty)."""
        self._blocks.clear()

    def calibrate(self, predicted_hit_rate: float, measured_hit_rate: float, weight: float = 0.2) -> None:
        """Move ``confidence`` towards the engine's measured hit rate over the index's own (clamped
        to 0.2..1).

        ``predicted_hit_rate`` is what the router predicted, its matches already discounted by
        ``confidence`` (``BackendState.cached_tokens``): the index's own rate is that over
        ``confidence``. Taken as the index's own, ``confidence`` settled at the square root of
        the engine's share (0.5 where the engine hit a quarter of what the index matched).
        """
        if predicted_hit_rate <= 0.01:
            return
        ratio = min(1.0, max(0.2, self.confidence * measured_hit_rate / predicted_hit_rate))
        self.confidence += weight * (ratio - self.confidence)
