"""``inclusion_proof`` and ``consistency_proof`` refuse a leaf hash that is not 32 bytes.

Until review R91c a leaf of another length was read as given and the proof came back without a
word, one no verifier accepts: a numpy ``S32`` array drops a hash's trailing zero bytes, so about
one hash in 256 was read as 31 bytes and its proof failed to verify. Each leaf the proof reads is
now ``InputError`` naming it and its length unless it is exactly 32 bytes.
"""

from __future__ import annotations

import pytest

from agentgate.audit import RootAccumulator, consistency_proof, inclusion_proof, leaf_hash, verify_inclusion
from agentgate.errors import InputError

LEAVES = [leaf_hash(bytes([n])) for n in range(8)]


@pytest.mark.parametrize("length", [0, 1, 31, 33, 64])
def test_a_leaf_of_another_length_is_refused_naming_it(length: int) -> None:
    leaves = [*LEAVES[:3], b"\x01" * length, *LEAVES[4:]]
    message = f"Merkle proof check: leaves[3] is {length} bytes, not a 32-byte leaf hash"
    with pytest.raises(InputError) as refused:
        inclusion_proof(leaves, 0)
    assert str(refused.value) == message
    with pytest.raises(InputError) as refused:
        consistency_proof(leaves, 2, 8)
    assert str(refused.value) == message
    with pytest.raises(InputError) as refused:
        inclusion_proof([*LEAVES[:3], bytearray(length), *LEAVES[4:]], 0)
    assert str(refused.value) == message


def test_a_numpy_s32_hash_ending_in_zero_is_refused_not_proven_wrong() -> None:
    numpy = pytest.importorskip("numpy")
    ends_in_zero = next(h for h in (leaf_hash(str(n).encode()) for n in range(10_000)) if h[-1] == 0)
    leaves = [*LEAVES[:3], ends_in_zero]
    given = numpy.array(leaves, dtype="S32")
    with pytest.raises(InputError, match=r"leaves\[3\] is 31 bytes, not a 32-byte leaf hash"):
        inclusion_proof(given, 0)
    accumulator = RootAccumulator()
    accumulator.extend(leaves)
    verify_inclusion(LEAVES[0], 0, 4, inclusion_proof(leaves, 0), accumulator.root())
