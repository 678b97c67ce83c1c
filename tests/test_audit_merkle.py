"""The Merkle tree of the audit log (agentgate/audit/merkle.py, RFC 9162): the root accumulator
builds only aligned subtrees, and an inclusion or consistency proof longer than the tree is deep,
or one to a smaller tree, is refused."""

from __future__ import annotations

import pytest

from agentgate.audit.merkle import (
    RootAccumulator,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    verify_consistency,
)
from agentgate.errors import TamperDetected


def _root(leaves: list[bytes]) -> bytes:
    acc = RootAccumulator()
    acc.extend(leaves)
    return acc.root()


def test_push_subtree_refuses_a_subtree_that_does_not_start_on_its_boundary() -> None:
    """Kills: the alignment check dropped from ``RootAccumulator.push_subtree``. Rule: a subtree of
    2**h leaves may only follow a multiple of 2**h leaves; anything else is a different tree
    (a wrong root), so it is refused."""
    acc = RootAccumulator()
    acc.add(leaf_hash(b"a"))
    with pytest.raises(ValueError, match="cannot follow 1 leaves"):
        acc.push_subtree(b"\x00" * 32, 1)
    acc.add(leaf_hash(b"b"))
    acc.push_subtree(b"\x00" * 32, 1)
    assert acc.size == 4


def test_an_inclusion_proof_with_a_hash_too_many_is_refused_as_too_long() -> None:
    """Kills: ``root_from_inclusion_proof`` without its stop when ``sn`` reaches 0 (RFC 9162
    2.1.3.2: "if sn is 0, stop and fail"). Rule: a proof longer than the tree is deep implies no
    root at all (the mutant returned a root with the extra hash folded in)."""
    leaves = [leaf_hash(bytes([i])) for i in range(5)]
    proof = inclusion_proof(leaves, 2)
    assert root_from_inclusion_proof(leaves[2], 2, 5, proof) == _root(leaves)
    with pytest.raises(TamperDetected, match="longer than the tree is deep"):
        root_from_inclusion_proof(leaves[2], 2, 5, [*proof, b"\x00" * 32])


def test_a_consistency_proof_with_a_hash_too_many_is_refused_as_too_long() -> None:
    """Kills: ``verify_consistency`` without its stop when ``sn`` reaches 0 (RFC 9162 2.1.4.2).
    Rule: a proof longer than the trees are deep is refused for what it is."""
    leaves = [leaf_hash(bytes([i])) for i in range(7)]
    proof = consistency_proof(leaves, 3, 7)
    verify_consistency(3, 7, proof, _root(leaves[:3]), _root(leaves))
    with pytest.raises(TamperDetected, match="longer than the trees are deep"):
        verify_consistency(3, 7, [*proof, b"\x00" * 32], _root(leaves[:3]), _root(leaves))


def test_a_consistency_proof_to_a_smaller_tree_is_refused() -> None:
    """Kills: ``verify_consistency`` without its ``size1 > size2`` check. Rule: a log never shrinks;
    without the check, a proof crafted from the old root (``[root1, c1, c2]``) "proves" that a tree
    of 5 leaves is a prefix of one of 3 whose root the log signs as H(H(root1, c1), c2)."""
    root1 = _root([leaf_hash(bytes([i])) for i in range(5)])
    c1, c2 = b"\x01" * 32, b"\x02" * 32
    root2 = node_hash(node_hash(root1, c1), c2)
    with pytest.raises(TamperDetected, match="never shrinks"):
        verify_consistency(5, 3, [root1, c1, c2], root1, root2)


def test_a_consistency_proof_between_negative_sizes_is_refused() -> None:
    """Kills: ``verify_consistency`` without a check that the sizes are not negative. Rule: a tree
    has 0 or more leaves; a proof "from size -1" proves nothing. Without the check, ``[root1, c]``
    "proved" a tree of -1 leaves a prefix of the one of 2 leaves whose root is H(root1, c), and
    any root "consistent" with itself between two sizes of -1."""
    root1, c = leaf_hash(b"a"), b"\x01" * 32
    with pytest.raises(TamperDetected, match="negative"):
        verify_consistency(-1, 2, [root1, c], root1, node_hash(root1, c))
    with pytest.raises(TamperDetected, match="negative"):
        verify_consistency(-1, -1, [], root1, root1)
    with pytest.raises(TamperDetected, match="negative"):
        verify_consistency(-3, -2, [root1, c], root1, node_hash(root1, c))
