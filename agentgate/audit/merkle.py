"""RFC 9162 (RFC 6962) Merkle tree hashing, inclusion proofs and consistency proofs.

Hashing is SHA-256 with domain separation: a leaf is ``SHA-256(0x00 || entry)``, an interior node
``SHA-256(0x01 || left || right)``, the empty tree ``SHA-256("")``. A tree of ``n`` leaves splits
at ``k``, the largest power of two below ``n``: the left subtree holds ``k`` leaves, the right one
the rest (RFC 9162 section 2.1.1).

Written by hand rather than taken from a library because the algorithms are short, fully
specified, and the conformance suite (tests/test_rfc6962_vectors.py, the 196 transparency-dev
cases) pins them; no maintained Python package implements both generation and verification of
RFC 9162 proofs without pulling in a whole transparency-log client.

- ``RootAccumulator`` computes the root of a stream of leaf hashes in O(log n) memory, the way
  a log verifier walks a million entries without holding them.
- ``inclusion_proof`` / ``consistency_proof`` generate proofs from the leaf hashes (RFC 9162
  2.1.3.1 and 2.1.4.1); ``inclusion_ranges`` / ``consistency_ranges`` name the subtrees a proof
  is made of, so a log can compute it in one streaming pass over its leaves (each raises
  ``ValueError`` for an index or size outside the tree); ``verify_inclusion`` /
  ``verify_consistency`` follow RFC 9162 2.1.3.2 and 2.1.4.2 and raise ``TamperDetected`` naming
  the check that failed. All of them raise ``InputError`` for an index or size that is not an
  integer: an ``int`` or what ``operator.index`` takes, a numpy integer.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence, Sized
from typing import cast

from agentgate._shown import quoted
from agentgate.errors import InputError, TamperDetected

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

_sha256 = hashlib.sha256


def leaf_hash(entry: bytes) -> bytes:
    """``SHA-256(0x00 || entry)``: the hash of one log entry; ``InputError`` when ``entry`` is
    not bytes."""
    try:
        return _sha256(b"\x00" + entry).digest()
    except TypeError:  # the refusal costs nothing on the path of every entry hashed
        raise InputError(f"leaf_hash: entry must be bytes, got {type(entry).__name__}") from None


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the hash of an interior node."""
    return _sha256(b"\x01" + left + right).digest()


class RootAccumulator:
    """The root of a growing list of leaf hashes, in O(log n) memory.

    Keeps the roots of the perfect subtrees that cover the leaves so far (at most one per bit of
    ``size``), merging equal heights as leaves arrive; ``root()`` folds them right to left, which
    is exactly the RFC 9162 split of a tree whose size is not a power of two.
    """

    __slots__ = ("_stack", "size")

    def __init__(self) -> None:
        self._stack: list[bytes] = []
        self.size = 0

    def add(self, leaf: bytes) -> None:
        """Append one leaf hash (already ``leaf_hash``-ed)."""
        stack = self._stack
        node = leaf
        size = self.size
        # Each trailing 1 bit of the old size is a complete subtree to merge with.
        while size & 1:
            node = _sha256(b"\x01" + stack.pop() + node).digest()
            size >>= 1
        stack.append(node)
        self.size += 1

    def extend(self, leaves: Sequence[bytes]) -> None:
        """Append many leaf hashes; the same as ``add`` for each, faster.

        The leaves are cut greedily into the largest perfect subtrees that the current size
        allows (a subtree of 2**h leaves can join when the size is a multiple of 2**h); each is
        hashed level by level, which costs the same n - 1 node hashes with far less interpreter
        work per node, then joins the stack as one node.
        """
        sha = _sha256
        position, count = 0, len(leaves)
        while position < count:
            remaining = count - position
            height = min(
                (self.size & -self.size).bit_length() - 1 if self.size else 64, remaining.bit_length() - 1
            )
            width = 1 << height
            level = list(leaves[position : position + width])
            while len(level) > 1:
                pairs = iter(level)
                level = [
                    sha(b"\x01" + left + right).digest() for left, right in zip(pairs, pairs, strict=False)
                ]
            self._push(level[0], height)
            position += width

    def push_subtree(self, node: bytes, height: int) -> None:
        """Append the root of a perfect subtree of ``2**height`` leaves (one already computed).

        Raises ``ValueError`` unless the size so far is a multiple of ``2**height``.
        """
        if self.size % (1 << height):
            raise ValueError(f"a subtree of 2**{height} leaves cannot follow {self.size} leaves")
        self._push(node, height)

    def _push(self, node: bytes, height: int) -> None:
        """Add the root of a perfect subtree of 2**height leaves; the size must be a multiple of it."""
        stack = self._stack
        pending = self.size >> height
        while pending & 1:
            node = _sha256(b"\x01" + stack.pop() + node).digest()
            pending >>= 1
        stack.append(node)
        self.size += 1 << height

    def root(self) -> bytes:
        """The root of the leaves added so far (``EMPTY_ROOT`` when none)."""
        if not self._stack:
            return EMPTY_ROOT
        node = self._stack[-1]
        for left in reversed(self._stack[:-1]):
            node = node_hash(left, node)
        return node


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _subtree_root(leaves: Sequence[object], lo: int, hi: int) -> bytes:
    """The root of the leaf hashes ``leaves[lo:hi]``, each checked as it is read (the proof's one
    pass over them) by ``_leaf_given``, so a proof is 32-byte ``bytes`` alone. An item that
    cannot be read (fewer items than the length says, a ``__getitem__`` that raises) is
    ``_leaves_refused`` naming it (until review R91c the caller's own error came out)."""
    acc = RootAccumulator()
    add = acc.add
    for i in range(lo, hi):
        try:
            leaf = leaves[i]
        except Exception as exc:  # the caller's container, whatever it raises
            raise _leaves_refused(leaves, f"leaves[{i}] cannot be read ({type(exc).__name__})") from None
        add(leaf if type(leaf) is bytes and len(leaf) == HASH_SIZE else _leaf_given(leaf, i))
    return acc.root()


def _leaf_given(value: object, position: int) -> bytes:
    """``leaves[position]``, a leaf hash a proof reads, as ``bytes``: a ``bytes``, ``bytearray``
    or ``memoryview`` (``_hash_given``) of exactly 32 bytes; ``InputError`` naming it otherwise.
    A hash of another length makes a proof no verifier accepts: until review R91c it was read as
    given, and ``inclusion_proof`` returned such a proof without a word (a numpy ``S32`` array,
    which drops a hash's trailing zero bytes, gave one hash in 256 as 31 bytes)."""
    name = f"leaves[{position}]"
    leaf = bytes(_hash_given(value, name))
    if len(leaf) != HASH_SIZE:
        raise InputError(f"Merkle proof check: {name} is {len(leaf)} bytes, not a {HASH_SIZE}-byte leaf hash")
    return leaf


def tree_integer(value: object, name: str, where: str = "Merkle proof check", *, bools: bool = True) -> int:
    """``value``, a leaf index or tree size a caller gave, as an ``int``: any integer that
    ``operator.index`` takes (an ``int`` or a subclass, a numpy integer), a bool too unless
    ``bools`` is false (here a bool is the number it is, as the range checks have always read
    it; the audit store, which reads these checks through this function, refuses it). Raises
    ``InputError`` saying ``where`` and naming the argument ``name`` for anything else, the value
    quoted as ``quoted`` writes it: the checks below compare and shift it, and a float or a
    string failed there with a bare ``TypeError`` (until review R86; until review R86b a numpy
    integer, verified before R86, was refused too, and until review R86c the audit store kept a
    copy of this check that refused one and quoted with ``repr``). An object whose own
    ``__index__`` raises (a ``ValueError``, an ``OverflowError``) is refused too, as
    ``tasks.backoff_bound`` refuses it: until review R88d only a ``TypeError`` was, and any other
    came out bare."""
    try:
        if isinstance(value, bool) and not bools:
            raise TypeError
        return operator.index(value)  # type: ignore[arg-type]
    except Exception:  # not an integer, or a caller's ``__index__`` that fails
        raise InputError(
            f"{where}: {name} must be a whole number (an int), got {quoted(value, 40)}"
        ) from None


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges ``[lo, hi)`` whose subtree roots are the audit path of leaf ``index`` in the
    tree of ``size`` leaves, leaf to root (RFC 9162 2.1.3.1). Disjoint; none holds ``index``.

    Raises ``ValueError`` when ``index`` is not in that tree, and ``InputError`` naming ``index``
    or ``size`` when it is not an integer.
    """
    index, size = tree_integer(index, "index"), tree_integer(size, "size")
    if not 0 <= index < size:
        raise ValueError(f"leaf {quoted(index)} is not in a tree of size {quoted(size)}")
    ranges: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo = lo + k
    ranges.reverse()
    return ranges


def inclusion_proof(leaves: Sequence[bytes], index: int, size: int | None = None) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of the first ``size`` leaves (RFC 9162 2.1.3.1).

    Raises ``ValueError`` when ``index`` is not in that tree, and ``InputError`` naming ``index``
    or ``size`` when it is not an integer, naming ``leaves`` when it has no length and items by
    position (``_leaves_given``), and naming a leaf the proof reads that is not a 32-byte hash
    (``_leaf_given``).
    """
    given, count = _leaves_given(leaves)
    index = tree_integer(index, "index")
    size = count if size is None else tree_integer(size, "size")
    if not 0 <= index < size <= count:
        raise ValueError(f"leaf {quoted(index)} is not in a tree of size {quoted(size)}")
    return [_subtree_root(given, lo, hi) for lo, hi in inclusion_ranges(index, size)]


def consistency_ranges(size1: int, size2: int) -> list[tuple[int, int]]:
    """The leaf ranges ``[lo, hi)`` whose subtree roots are the consistency proof from ``size1`` to
    ``size2``, in proof order (RFC 9162 2.1.4.1). Disjoint; empty when the sizes are equal.

    Raises ``ValueError`` unless ``0 < size1 <= size2``, and ``InputError`` naming ``size1`` or
    ``size2`` when it is not an integer.

    RFC 9162's SUBPROOF walked down as a loop, one step per level of the tree: each step keeps
    the subtree the old tree ends in and notes its sibling, which joins the proof on the way back
    up (until review R84 a recursion, one call per bit of ``size2``: a size of 2**1200 raised
    ``RecursionError``).
    """
    size1, size2 = tree_integer(size1, "size1"), tree_integer(size2, "size2")
    if not 0 < size1 <= size2:
        raise ValueError(f"no consistency proof from size {quoted(size1)} to size {quoted(size2)}")
    m, lo, hi, complete = size1, 0, size2, True
    siblings: list[tuple[int, int]] = []
    while m != hi - lo:
        k = _split(hi - lo)
        if m <= k:
            siblings.append((lo + k, hi))
            hi = lo + k
        else:
            siblings.append((lo, lo + k))
            m, lo, complete = m - k, lo + k, False
    ranges = [] if complete else [(lo, hi)]
    ranges.extend(reversed(siblings))
    return ranges


def consistency_proof(leaves: Sequence[bytes], size1: int, size2: int | None = None) -> list[bytes]:
    """The proof that the tree of ``size1`` leaves is a prefix of the one of ``size2`` (RFC 9162 2.1.4.1).

    Empty when the sizes are equal. Raises ``ValueError`` unless ``0 < size1 <= size2 <= len(leaves)``,
    and ``InputError`` naming ``size1`` or ``size2`` when it is not an integer, ``leaves`` when it
    has no length and items by position (``_leaves_given``), and a leaf the proof reads that is
    not a 32-byte hash (``_leaf_given``).
    """
    given, count = _leaves_given(leaves)
    size1 = tree_integer(size1, "size1")
    size2 = count if size2 is None else tree_integer(size2, "size2")
    if not 0 < size1 <= size2 <= count:
        raise ValueError(f"no consistency proof from size {quoted(size1)} to size {quoted(size2)}")
    return [_subtree_root(given, lo, hi) for lo, hi in consistency_ranges(size1, size2)]


def _leaves_given(leaves: object) -> tuple[Sequence[object], int]:
    """``leaves``, the leaf hashes a caller gave to build a proof from, and how many it holds,
    when it has a length and items by position (a ``list``, a ``tuple``, any object with
    ``__len__`` and ``__getitem__``: each leaf is read and checked by ``_subtree_root``);
    ``_leaves_refused`` otherwise: ``None``, a ``str`` or ``bytes`` (whose items are characters
    or numbers), a mapping (whose items are by key), a length that cannot be read (negative, too
    large, a ``__len__`` that raises). Until review R91 ``inclusion_proof(None, 0)`` was a bare
    ``TypeError`` and ``inclusion_proof("ab", 0)`` returned ``['b']``; until review R91b any
    sequence not registered as ``Sequence`` was refused, though it had always been read; until
    review R91c a mapping was read by key and a length that could not be read raised the
    caller's own error (a ``KeyError``, an ``OverflowError``, a ``ValueError``)."""
    positional = isinstance(leaves, Sized) and hasattr(type(leaves), "__getitem__")
    if not positional or isinstance(leaves, str | bytes | bytearray | memoryview | Mapping):
        raise _leaves_refused(leaves)
    try:
        return cast("Sequence[object]", leaves), len(cast("Sized", leaves))
    except Exception:  # no length after all (a numpy array of no dimension), or one len() refuses
        raise _leaves_refused(leaves) from None


def _leaves_refused(leaves: object, detail: str = "") -> InputError:
    """The one error for ``leaves`` that are no sequence of leaf hashes, naming its type and,
    where an item could not be read, ``detail``."""
    return InputError(
        f"Merkle proof check: leaves must be a sequence of leaf hashes (bytes), got {type(leaves).__name__}"
        + (f": {detail}" if detail else "")
    )


def _hash_given(value: object, name: str) -> bytes:
    """``value``, a hash a caller gave as ``name``, when it is bytes (a ``bytearray`` too, and a
    ``memoryview`` as the bytes it holds); ``InputError`` naming ``name`` and what it got
    otherwise, a released ``memoryview`` included (until review R90b a bare ``ValueError``). Its
    length is the proof's to check (``TamperDetected``): a hash of the wrong type is the caller's
    error, one of the wrong length may be a tampered proof. Until review R90 a ``str`` or
    ``None`` failed with a bare ``TypeError``."""
    if isinstance(value, bytes | bytearray):
        return value  # type: ignore[return-value]  # concatenated and compared as bytes are
    if isinstance(value, memoryview):
        try:
            return value.tobytes()
        except ValueError:  # released: it holds nothing to read
            raise InputError(f"Merkle proof check: {name} is a released memoryview") from None
    raise InputError(f"Merkle proof check: {name} must be a hash (bytes), got {type(value).__name__}")


def _proof_given(proof: object) -> list[bytes]:
    """``proof``, a sequence of hashes a caller gave, as a list, each item checked by
    ``_hash_given``; ``InputError`` for one that is no sequence of them (``None``, a ``str``, a
    ``bytes``: its items are numbers)."""
    if isinstance(proof, str | bytes | bytearray | memoryview) or not isinstance(proof, Sequence):
        raise InputError(
            f"Merkle proof check: proof must be a sequence of hashes (bytes), got {type(proof).__name__}"
        )
    return [_hash_given(item, f"proof[{i}]") for i, item in enumerate(proof)]


def _check_hashes(proof: Sequence[bytes]) -> None:
    for i, item in enumerate(proof):
        if len(item) != HASH_SIZE:
            raise TamperDetected(f"proof hash {i} is {len(item)} bytes, not {HASH_SIZE}")


def root_from_inclusion_proof(leaf: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """The root that ``proof`` implies for ``leaf`` at ``index`` in a tree of ``size`` (RFC 9162 2.1.3.2).

    Raises ``TamperDetected`` when the proof cannot belong to such a tree, and ``InputError``
    naming ``index`` or ``size`` when it is not an integer, ``leaf`` or an item of ``proof`` when
    it is not bytes, ``proof`` when it is no sequence.
    """
    index, size = tree_integer(index, "index"), tree_integer(size, "size")
    leaf, proof = _hash_given(leaf, "leaf"), _proof_given(proof)
    if not 0 <= index < size:
        raise TamperDetected(f"leaf index {quoted(index)} is outside a tree of size {quoted(size)}")
    if len(leaf) != HASH_SIZE:
        raise TamperDetected(f"leaf hash is {len(leaf)} bytes, not {HASH_SIZE}")
    _check_hashes(proof)
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise TamperDetected("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise TamperDetected("inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Return if ``proof`` shows ``leaf`` at ``index`` in the tree of ``size`` with ``root``.

    Raises ``TamperDetected`` otherwise, and ``InputError`` naming ``index`` or ``size`` when it is
    not an integer, a hash (``leaf``, ``root``, an item of ``proof``) when it is not bytes, and
    ``proof`` when it is no sequence.
    """
    index, size = tree_integer(index, "index"), tree_integer(size, "size")
    root = _hash_given(root, "root")
    if root_from_inclusion_proof(leaf, index, size, proof) != root:
        raise TamperDetected(
            f"inclusion proof for leaf {quoted(index)} does not lead to the root of size {quoted(size)}"
        )


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> None:
    """Return if ``proof`` shows the tree (``size1``, ``root1``) is a prefix of (``size2``, ``root2``).

    Follows RFC 9162 2.1.4.2. A proof from the empty tree is refused (it proves nothing), as is a
    non-empty proof between equal sizes, and a negative size (no tree has one). Raises
    ``TamperDetected`` naming the failed check, and ``InputError`` naming ``size1`` or ``size2``
    when it is not an integer, a hash (``root1``, ``root2``, an item of ``proof``) when it is not
    bytes, and ``proof`` when it is no sequence (``None`` included).
    """
    size1, size2 = tree_integer(size1, "size1"), tree_integer(size2, "size2")
    proof = _proof_given(proof)
    root1, root2 = _hash_given(root1, "root1"), _hash_given(root2, "root2")
    if size1 < 0 or size2 < 0:
        raise TamperDetected(f"tree sizes {quoted(size1)} and {quoted(size2)}: a tree size is never negative")
    if size1 > size2:
        raise TamperDetected(
            f"size1 {quoted(size1)} is larger than size2 {quoted(size2)}: a log never shrinks"
        )
    if size1 == 0:
        raise TamperDetected("a consistency proof from the empty tree proves nothing")
    if size1 == size2:
        if proof:
            raise TamperDetected("sizes are equal but the consistency proof is not empty")
        if root1 != root2:
            raise TamperDetected(f"two different roots for the same size {quoted(size1)}")
        return
    if not proof:
        raise TamperDetected("consistency proof is empty")
    _check_hashes(proof)
    path = list(proof)
    if size1 & (size1 - 1) == 0:  # size1 is a power of two: its root is the first node
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise TamperDetected("consistency proof is longer than the trees are deep")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise TamperDetected("consistency proof is shorter than the trees are deep")
    if fr != root1:
        raise TamperDetected(f"consistency proof does not lead to the root of size {quoted(size1)}")
    if sr != root2:
        raise TamperDetected(f"consistency proof does not lead to the root of size {quoted(size2)}")
