"""The cached roots of whole blocks of leaf hashes (``_CachedRoots``, table ``audit_nodes``):
subtree roots for proofs built from them and the leaf hashes of the rest. A cache only, covered by
no signature: a proof built from it is checked against the signed root, and rebuilt from the leaf
hashes when it does not match."""

from __future__ import annotations

from collections.abc import Sequence

from agentgate.audit.merkle import RootAccumulator
from agentgate.errors import StoreError, TamperDetected
from agentgate.store._base import Store, loaded_driver_errors
from agentgate.store.audit._stored import _bytes

_NODE_LEVEL = 10
"""Height of the cached subtree roots (``audit_nodes``): blocks of 1024 leaf hashes."""


class _CachedRoots:
    """The ``AuditLog``'s cache of block roots: the roots of the subtrees a proof needs
    (``_cached_roots``), from the roots of whole blocks of ``2**_NODE_LEVEL`` leaf hashes (read from
    ``audit_nodes``, or computed and stored there) and the stored leaf hashes of the rest."""

    # The log's state this part reads (``AuditLog.__init__`` sets it).
    store: Store
    _hash: str
    _leaf: str
    _caches: bool

    def _cached_roots(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The roots of the RFC 9162 subtrees ``[lo, hi)`` in ``ranges`` (as ``_subtree_roots``),
        from the cached roots of whole blocks (``audit_nodes``, computed and stored when missing)
        and the leaf hashes of the rest. A subtree of at least one block starts at a multiple of it.
        Raises ``TamperDetected`` when a leaf hash it needs is missing."""
        width = 1 << _NODE_LEVEL
        blocks: set[int] = set()
        for lo, hi in ranges:
            if hi - lo >= width:
                blocks.update(range(lo // width, hi // width))
        cached = self._nodes(blocks)
        roots = []
        for lo, hi in ranges:
            acc = RootAccumulator()
            start = lo
            if hi - lo >= width:
                for block in range(lo // width, hi // width):
                    acc.push_subtree(cached[block], _NODE_LEVEL)
                start = hi // width * width
            acc.extend(self._leaves(start, hi))
            roots.append(acc.root())
        return roots

    def _nodes(self, blocks: set[int]) -> dict[int, bytes]:
        """``block -> root`` of each block of ``2**_NODE_LEVEL`` leaves in ``blocks``: read from
        ``audit_nodes``, or computed from the leaf hashes and stored there (best effort: a role
        that may not write the cache, a log without it, or a log opened to read, only computes)."""
        found: dict[int, bytes] = {}
        ordered = sorted(blocks)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            try:
                rows = self.store.query(
                    f"SELECT position, {self._hash} FROM audit_nodes "
                    "WHERE level = ? AND position >= ? AND position <= ?",
                    (_NODE_LEVEL, chunk[0], chunk[-1]),
                )
            except loaded_driver_errors(StoreError):
                rows = []
            # SQLite keeps whatever a row was given: a position that is not an integer is no
            # block, and a hash of another type or length is a wrong node (the proof fails and
            # is rebuilt from the leaf hashes), never an exception.
            found.update((p, _bytes(h)) for p, h in rows if type(p) is int and p in blocks)
        missing = [b for b in ordered if b not in found]
        width = 1 << _NODE_LEVEL
        for start in range(0, len(missing), 64):
            made = []
            for block in missing[start : start + 64]:
                acc = RootAccumulator()
                acc.extend(self._leaves(block * width, (block + 1) * width))
                found[block] = acc.root()
                made.append((_NODE_LEVEL, block, found[block]))
            if not self._caches:
                continue
            try:
                with self.store.transaction() as tx:
                    tx.executemany(
                        "INSERT INTO audit_nodes (level, position, hash) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                        made,
                    )
            except loaded_driver_errors(StoreError):
                pass  # a cache only: the next explain computes these again
        return found

    def _forget_nodes(self) -> None:
        """Empty the node cache (one of its roots did not match the leaf hashes), if allowed (not
        in a log opened to read: its reads build proofs from the leaf hashes after a wrong node)."""
        if not self._caches:
            return
        try:
            with self.store.transaction() as tx:
                tx.execute("DELETE FROM audit_nodes")
        except loaded_driver_errors(StoreError):
            pass

    def _leaves(self, lo: int, hi: int) -> list[bytes]:
        """The stored leaf hashes of entries ``[lo, hi)``; ``TamperDetected`` if one is missing."""
        rows = self.store.query(
            f"SELECT {self._leaf} FROM audit_log WHERE idx >= ? AND idx < ? ORDER BY idx", (lo, hi)
        )
        if len(rows) != hi - lo:
            raise TamperDetected(f"audit log: entries are missing between {lo} and {hi}")
        return [_bytes(row[0]) for row in rows]
