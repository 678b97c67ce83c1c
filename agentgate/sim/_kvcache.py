"""A paged KV cache with prefix reuse by block hash and LRU eviction, as vLLM's prefix caching.

Memory is counted in tokens. A prompt's full blocks of ``block_tokens`` tokens are identified by
chained hashes (the hash of a block covers every block before it), so equal hashes mean an equal
prefix. A running request holds references to the hashed blocks it uses and some private tokens
(the partial last block, generated tokens). A hashed block whose last reference goes away stays
cached, evictable, in LRU order: a finished request's blocks are queued tail first, so a shared
prefix outlives the suffixes that hang off it (vLLM's free-block queue does the same).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class KVCache:
    """Token-counted paged KV memory with a hashed, reference-counted, LRU-evicted prefix cache."""

    def __init__(self, capacity_tokens: int, block_tokens: int) -> None:
        if capacity_tokens <= 0 or block_tokens <= 0:
            raise ValueError("capacity and block size must be positive")
        self.capacity = capacity_tokens
        self.block_tokens = block_tokens
        self._refs: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._private = 0

    @property
    def used_tokens(self) -> int:
        """Tokens held by running requests (private tokens and referenced blocks)."""
        return self._private + (len(self._refs) - len(self._evictable)) * self.block_tokens

    @property
    def cached_tokens(self) -> int:
        """Tokens in hashed blocks, referenced or not."""
        return len(self._refs) * self.block_tokens

    @property
    def free_tokens(self) -> int:
        """Tokens neither held nor cached."""
        return self.capacity - self._private - len(self._refs) * self.block_tokens

    @property
    def usage(self) -> float:
        """Fraction of capacity held by running requests; evictable cached blocks count as free."""
        return self.used_tokens / self.capacity

    def available(self) -> int:
        """Tokens that can be allocated now, evicting cached blocks if needed."""
        return self.free_tokens + len(self._evictable) * self.block_tokens

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks of ``hashes`` present in the cache."""
        n = 0
        for h in hashes:
            if h not in self._refs:
                break
            n += 1
        return n

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take a reference on each (present) block, taking it off the eviction queue."""
        for h in hashes:
            self._refs[h] += 1
            self._evictable.pop(h, None)

    def release(self, hashes: Sequence[int]) -> None:
        """Drop one reference on each block; blocks that reach zero become evictable, tail first."""
        for h in reversed(hashes):
            left = self._refs[h] - 1
            self._refs[h] = left
            if left == 0:
                self._evictable[h] = None

    def allocate(self, tokens: int) -> bool:
        """Reserve ``tokens`` private tokens, evicting LRU cached blocks if needed; False if full."""
        if tokens > self.available():
            return False
        while self.free_tokens < tokens:
            h, _ = self._evictable.popitem(last=False)
            del self._refs[h]
        self._private += tokens
        return True

    def free(self, tokens: int) -> None:
        """Return ``tokens`` private tokens."""
        self._private -= tokens

    def promote(self, hashes: Sequence[int]) -> list[int]:
        """Turn private tokens of a just-prefilled prompt into hashed blocks, one per hash.

        Blocks already cached (another request computed them meanwhile) are shared instead and the
        duplicate private tokens are freed. Returns the hashes now referenced by the caller.
        """
        held: list[int] = []
        for h in hashes:
            self._private -= self.block_tokens
            if h in self._refs:
                self._refs[h] += 1
                self._evictable.pop(h, None)
            else:
                self._refs[h] = 1
            held.append(h)
        return held
