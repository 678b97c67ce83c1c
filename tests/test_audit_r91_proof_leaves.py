"""``inclusion_proof`` and ``consistency_proof`` refuse leaves that are no sequence of hashes.

Until review R91 the leaves were not checked: ``inclusion_proof(None, 0)`` was a bare
``TypeError`` (``len(None)``), and ``inclusion_proof("ab", 0)`` returned ``['b']``, a "proof" made
of a character, as the subtree root of one leaf is that leaf.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentgate.audit import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from agentgate.audit.merkle import RootAccumulator
from agentgate.errors import InputError

LEAVES = [leaf_hash(bytes([n])) for n in range(5)]


def _as_given(value: object) -> Any:
    """``value`` as a caller without type checks passes it."""
    return value


@pytest.mark.parametrize(
    "prove",
    [lambda leaves: inclusion_proof(leaves, 0), lambda leaves: consistency_proof(leaves, 1)],
    ids=["inclusion", "consistency"],
)
@pytest.mark.parametrize(
    ("leaves", "said"),
    [
        (None, "Merkle proof check: leaves must be a sequence of leaf hashes (bytes), got NoneType"),
        ("ab", "Merkle proof check: leaves must be a sequence of leaf hashes (bytes), got str"),
        (b"ab", "Merkle proof check: leaves must be a sequence of leaf hashes (bytes), got bytes"),
        ([LEAVES[0], "b"], "Merkle proof check: leaves[1] must be a hash (bytes), got str"),
        ([LEAVES[0], None], "Merkle proof check: leaves[1] must be a hash (bytes), got NoneType"),
    ],
    ids=["None", "str", "bytes", "str-leaf", "None-leaf"],
)
def test_leaves_that_are_no_sequence_of_hashes_are_refused(
    prove: Callable[[Any], object], leaves: object, said: str
) -> None:
    with pytest.raises(InputError) as refused:
        prove(_as_given(leaves))
    assert str(refused.value) == said


def test_proofs_from_bytes_like_leaves_are_bytes_and_verify() -> None:
    acc = RootAccumulator()
    acc.extend(LEAVES)
    given = [bytearray(LEAVES[0]), memoryview(LEAVES[1]), *LEAVES[2:]]
    proof = inclusion_proof(_as_given(given), 1)
    assert proof == inclusion_proof(LEAVES, 1) and all(type(h) is bytes for h in proof)
    verify_inclusion(LEAVES[1], 1, 5, proof, acc.root())
    small = RootAccumulator()
    small.extend(LEAVES[:2])
    verify_consistency(2, 5, consistency_proof(_as_given(given), 2), small.root(), acc.root())
