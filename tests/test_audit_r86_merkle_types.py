"""Review R86: ``verify_consistency`` and ``verify_inclusion`` (``root_from_inclusion_proof``)
given a size or leaf index that is not an ``int`` (a float, a string, ``None``) raised a bare
``TypeError`` from their arithmetic. Rule: ``InputError`` naming the argument; a bool, an
``int``, is read as the number it is, as before."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.audit.merkle import (
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)
from agentgate.errors import InputError

LEAF = leaf_hash(b"x")


@pytest.mark.parametrize(
    ("check", "named"),
    [
        (
            lambda: verify_consistency(2.0, 4, [LEAF], LEAF, LEAF),
            "size1 must be a whole number (an int), got 2.0",
        ),
        (
            lambda: verify_consistency(1, "4", [LEAF], LEAF, LEAF),
            "size2 must be a whole number (an int), got '4'",
        ),
        (
            lambda: verify_consistency(None, None, [], LEAF, LEAF),
            "size1 must be a whole number (an int), got None",
        ),
        (
            lambda: verify_inclusion(LEAF, 0.5, 2, [LEAF], LEAF),
            "index must be a whole number (an int), got 0.5",
        ),
        (
            lambda: verify_inclusion(LEAF, "0", 2, [LEAF], LEAF),
            "index must be a whole number (an int), got '0'",
        ),
        (
            lambda: verify_inclusion(LEAF, 0, 2.0, [LEAF], LEAF),
            "size must be a whole number (an int), got 2.0",
        ),
        (
            lambda: root_from_inclusion_proof(LEAF, 1, "2", [LEAF]),
            "size must be a whole number (an int), got '2'",
        ),
    ],
    ids=["size1-float", "size2-str", "sizes-none", "index-float", "index-str", "size-float", "root-size-str"],
)
def test_a_size_or_index_that_is_not_an_int_is_refused_naming_it(
    check: Callable[[], object], named: str
) -> None:
    with pytest.raises(InputError) as caught:
        check()
    assert str(caught.value) == f"Merkle proof check: {named}"


def test_a_bool_is_still_read_as_the_number_it_is() -> None:
    other = leaf_hash(b"y")
    verify_inclusion(other, True, 2, [LEAF], node_hash(LEAF, other))
    verify_consistency(True, True, [], LEAF, LEAF)
