"""The cache of verified chains: bounded in entries and in the memory the parsed chains hold.

A decision takes a chain from here by its token (and the trust anchors it was verified against)
instead of parsing and verifying it again; only the time-independent checks (signatures, links,
attenuation) are cached, so what depends on time or on the store is still checked every time.
"""

from __future__ import annotations

import threading

from agentgate._shown import quoted
from agentgate.authority._grant import Chain
from agentgate.errors import InputError

PARSED_ITEM_BYTES = 600
"""About what one link, capability or constraint of a parsed chain takes in memory (measured: 390
to 570 bytes, the parsed constraint's normal form included), for ``chain_weight``."""

PARSED_MEMBER_BYTES = 160
"""About what one value of an ``in`` set takes once its chain is verified and decided on, beyond
its bytes in the token: the value as an object, its slots in the constraint and its normal form,
and its entry in the set that membership is looked up in (built at the first decision). Measured:
60 to 125 bytes (1-character strings take the most), for ``chain_weight``."""


def chain_weight(token: str, chain: Chain) -> int:
    """About the memory ``chain``, parsed from ``token``, holds: the token, ``PARSED_ITEM_BYTES``
    per link, capability and constraint, and ``PARSED_MEMBER_BYTES`` per value of an ``in`` set.
    The token's length alone underestimates it up to 20-fold (many constrained capabilities), and
    any holder of a delegable grant can mint such chains. Until review R56 set values were not
    counted: chains of 1,000-value sets of 1-character strings held 12 times their weight."""
    items = members = 0
    for link in chain.links:
        items += 1 + len(link.capabilities)
        for cap in link.capabilities:
            items += len(cap.constraints)
            for _, constraint in cap.constraints:
                members += len(constraint.one_of or ())
    return len(token) + PARSED_ITEM_BYTES * items + PARSED_MEMBER_BYTES * members


class ChainCache:
    """Verified chains by (trust anchors, token), bounded in entries and in memory (``max_bytes``
    of ``chain_weight``).

    Only chains that passed the time-independent checks are stored; the oldest entries go first.
    Raises ``InputError`` for a ``size`` or ``max_bytes`` that is not a whole number, 1 or more:
    until review R56 a string or ``None`` raised a ``TypeError`` from the decision that cached a
    second chain, and a NaN bounded nothing (every comparison with it is false). What it checked
    stays as checked: ``size`` and ``max_bytes`` are read-only, and assigning one raises
    ``AttributeError`` (until review R89 an assigned string or NaN got past that check the same
    way; a cache of another size is a new ``ChainCache``).
    """

    def __init__(self, size: int = 4096, max_bytes: int = 64 * 1024 * 1024) -> None:
        for name, value in (("size", size), ("max_bytes", max_bytes)):
            if type(value) is not int or value < 1:
                raise InputError(
                    f"a chain cache's {name} is a whole number, 1 or more, got {quoted(value, 40)}"
                )
        self._size = size
        self._max_bytes = max_bytes
        self._items: dict[tuple[frozenset[str], str], tuple[Chain, int]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """The most chains kept, as checked; read-only."""
        return self._size

    @property
    def max_bytes(self) -> int:
        """The most ``chain_weight`` the kept chains add up to, as checked; read-only."""
        return self._max_bytes

    def get(self, anchors: frozenset[str], token: str) -> Chain | None:
        kept = self._items.get((anchors, token))
        return None if kept is None else kept[0]

    def put(self, anchors: frozenset[str], token: str, chain: Chain) -> None:
        weight = chain_weight(token, chain)
        with self._lock:
            if (anchors, token) in self._items or weight > self._max_bytes:
                return
            while self._items and (len(self._items) >= self._size or self._bytes + weight > self._max_bytes):
                oldest = next(iter(self._items))
                self._bytes -= self._items.pop(oldest)[1]
            self._items[(anchors, token)] = (chain, weight)
            self._bytes += weight

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


_SHARED_CACHE = ChainCache()
