"""Review R86b: R86's check that a Merkle proof's size or leaf index is an ``int``
(``isinstance``) refused the integers that verified before it: a numpy ``int64`` size or index,
or any other object ``operator.index`` takes. Rule: such an integer is read as its ``int``; a
float or a string is still refused with ``InputError`` naming the argument."""

from __future__ import annotations

import pytest

from agentgate.audit.merkle import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)
from agentgate.errors import InputError, TamperDetected

LEAVES = [leaf_hash(bytes([i])) for i in range(5)]


class Integer:
    """An integer type of its own, as numpy's are: not an ``int``, but ``operator.index`` takes it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def _root(size: int) -> bytes:
    return root_from_inclusion_proof(LEAVES[0], 0, size, inclusion_proof(LEAVES, 0, size))


def test_an_integer_that_operator_index_takes_is_read_as_its_int() -> None:
    path = inclusion_proof(LEAVES, 2)
    verify_inclusion(LEAVES[2], Integer(2), Integer(5), path, _root(5))  # type: ignore[arg-type]
    verify_consistency(Integer(3), Integer(5), consistency_proof(LEAVES, 3), _root(3), _root(5))  # type: ignore[arg-type]
    with pytest.raises(TamperDetected):
        verify_inclusion(LEAVES[2], Integer(3), Integer(5), path, _root(5))  # type: ignore[arg-type]


def test_a_numpy_integer_is_read_as_its_int() -> None:
    numpy = pytest.importorskip("numpy")
    path = inclusion_proof(LEAVES, 2)
    verify_inclusion(LEAVES[2], numpy.int64(2), numpy.uint32(5), path, _root(5))
    verify_consistency(numpy.int64(3), numpy.int64(5), consistency_proof(LEAVES, 3), _root(3), _root(5))


def test_what_is_no_integer_is_still_refused_naming_it() -> None:
    with pytest.raises(InputError, match="index must be a whole number"):
        verify_inclusion(LEAVES[2], 2.0, 5, inclusion_proof(LEAVES, 2), _root(5))  # type: ignore[arg-type]
