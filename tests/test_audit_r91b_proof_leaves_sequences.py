"""``inclusion_proof`` and ``consistency_proof`` read leaves by length and position, as always.

Review R91 refused leaves that are no ``collections.abc.Sequence``, so a numpy array of hashes
(``S32`` or ``object``) and any object with ``__len__`` and ``__getitem__`` not registered as a
``Sequence``, all read before, became ``InputError ... got ndarray``; and it copied and checked
every leaf in a pass of its own before the proof's, 1.5 to 2 times the cost. Each leaf is now
checked as the proof reads it, and leaves need only a length and items by position.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.audit import consistency_proof, inclusion_proof, leaf_hash
from agentgate.errors import InputError

LEAVES = [leaf_hash(bytes([n])) for n in range(7)]


class Positional:
    """Leaf hashes with a length and items by position, not registered as a ``Sequence``;
    counting the reads of each position."""

    def __init__(self, leaves: list[bytes]) -> None:
        self.leaves = leaves
        self.reads = [0] * len(leaves)

    def __len__(self) -> int:
        return len(self.leaves)

    def __getitem__(self, position: int) -> bytes:
        self.reads[position] += 1
        return self.leaves[position]


def _as_given(value: object) -> Any:
    """``value`` as a caller without type checks passes it."""
    return value


def test_leaves_with_a_length_and_items_by_position_are_read_once_each() -> None:
    given = Positional(LEAVES)
    assert inclusion_proof(_as_given(given), 2) == inclusion_proof(LEAVES, 2)
    assert max(given.reads) == 1  # one pass: each leaf the proof needs read once, none copied first
    given = Positional(LEAVES)
    assert consistency_proof(_as_given(given), 3) == consistency_proof(LEAVES, 3)
    assert max(given.reads) == 1


@pytest.mark.parametrize("dtype", ["S32", "object"])
def test_a_numpy_array_of_hashes_is_read_as_its_hashes(dtype: str) -> None:
    numpy = pytest.importorskip("numpy")
    given = numpy.array(LEAVES, dtype=dtype)
    proof = inclusion_proof(given, 2)
    assert proof == inclusion_proof(LEAVES, 2) and all(type(h) is bytes for h in proof)
    assert consistency_proof(given, 3, 6) == consistency_proof(LEAVES, 3, 6)


def test_what_has_no_length_and_items_is_still_refused() -> None:
    numpy = pytest.importorskip("numpy")
    for leaves, name in ((set(LEAVES), "set"), (numpy.array(LEAVES[0], dtype="S32"), "ndarray")):
        with pytest.raises(InputError) as refused:
            inclusion_proof(_as_given(leaves), 0)
        assert str(refused.value) == (
            f"Merkle proof check: leaves must be a sequence of leaf hashes (bytes), got {name}"
        )
