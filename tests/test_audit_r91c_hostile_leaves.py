"""``inclusion_proof`` and ``consistency_proof`` refuse every container that is no sequence of
leaf hashes with one ``InputError`` naming ``leaves``.

Review R91b read leaves by length and position, catching only the ``TypeError`` of a length
that cannot be read: a mapping came out as a ``KeyError`` (or, keyed 0 to N-1, was read as
leaves), a ``__len__`` of 2**70 as an ``OverflowError``, a negative or raising one as a
``ValueError`` (which reads as "not in the tree"), fewer items than the length says as an
``IndexError``, a raising ``__getitem__`` as its own error. Review R91 (da95ab8f) refused them
all as ``leaves must be a sequence``; they are refused so again.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.audit import consistency_proof, inclusion_proof, leaf_hash
from agentgate.errors import InputError

LEAVES = [leaf_hash(bytes([n])) for n in range(8)]


class Length:
    """The eight leaf hashes, behind a ``__len__`` that says ``length`` or raises it."""

    def __init__(self, length: int | Exception) -> None:
        self.length = length

    def __len__(self) -> int:
        if isinstance(self.length, Exception):
            raise self.length
        return self.length

    def __getitem__(self, position: int) -> bytes:
        return LEAVES[position]


class Unreadable:
    """A length of 8 and items that cannot be read."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, position: int) -> bytes:
        raise RuntimeError("unreadable")


HOSTILE: dict[str, tuple[Any, str]] = {
    "mapping by position": (dict(enumerate(LEAVES)), "got dict"),
    "mapping by name": ({"a": LEAVES[0], "b": LEAVES[1]}, "got dict"),
    "huge length": (Length(2**70), "got Length"),
    "negative length": (Length(-1), "got Length"),
    "raising length": (Length(ValueError("no length")), "got Length"),
    "fewer items than the length": (Length(20), "got Length: leaves[8] cannot be read (IndexError)"),
    "raising items": (Unreadable(), "got Unreadable: leaves[1] cannot be read (RuntimeError)"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_leaves_container_is_refused_naming_leaves(name: str) -> None:
    leaves, got = HOSTILE[name]
    refusal = "Merkle proof check: leaves must be a sequence of leaf hashes (bytes), "
    with pytest.raises(InputError) as refused:
        inclusion_proof(leaves, 0)
    assert str(refused.value) == refusal + got
    with pytest.raises(InputError) as refused:
        consistency_proof(leaves, 3)
    assert str(refused.value).startswith(refusal + got.partition(":")[0])


def test_an_honest_length_and_items_are_still_read() -> None:
    assert inclusion_proof(Length(8), 5) == inclusion_proof(LEAVES, 5)
    assert consistency_proof(Length(8), 3) == consistency_proof(LEAVES, 3)
