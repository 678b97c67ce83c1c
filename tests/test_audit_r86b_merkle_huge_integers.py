"""Review R86b: an index or size of more than 4,300 digits (``10**5000``, an integer as R86's check
wants) reached a message that wrote it in decimal, which Python refuses: ``verify_inclusion``,
``verify_consistency`` and the proof builders raised a bare ``ValueError`` about integer string
conversion instead of refusing it. Rule: the refusal is raised, quoting such an integer by its
size (``_shown.quoted``), as other messages do."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.audit.merkle import (
    consistency_proof,
    consistency_ranges,
    inclusion_proof,
    inclusion_ranges,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from agentgate.errors import InputError, TamperDetected

LEAF = leaf_hash(b"x")
HUGE = 10**5000


@pytest.mark.parametrize(
    ("check", "said"),
    [
        (
            lambda: verify_inclusion(LEAF, HUGE, 2, [LEAF], LEAF),
            "leaf index an integer of 16610 bits is outside",
        ),
        (lambda: verify_inclusion(LEAF, 0, -HUGE, [LEAF], LEAF), "tree of size an integer of 16610 bits"),
        (lambda: verify_consistency(HUGE, 3, [LEAF], LEAF, LEAF), "size1 an integer of 16610 bits is larger"),
        (
            lambda: verify_consistency(-HUGE, 3, [LEAF], LEAF, LEAF),
            "tree sizes an integer of 16610 bits and 3",
        ),
        (
            lambda: verify_consistency(1, -HUGE, [LEAF], LEAF, LEAF),
            "tree sizes 1 and an integer of 16610 bits",
        ),
    ],
    ids=["index", "negative-size", "size1", "negative-size1", "negative-size2"],
)
def test_a_proof_check_refuses_an_integer_too_long_to_write(check: Callable[[], object], said: str) -> None:
    with pytest.raises(TamperDetected, match=said):
        check()


@pytest.mark.parametrize(
    "build",
    [
        lambda: inclusion_proof([LEAF, LEAF], HUGE),
        lambda: inclusion_ranges(-HUGE, 2),
        lambda: consistency_proof([LEAF, LEAF], HUGE),
        lambda: consistency_ranges(2, -HUGE),
    ],
)
def test_a_proof_builder_refuses_an_integer_too_long_to_write(build: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="an integer of 16610 bits"):
        build()


def test_what_is_no_integer_and_holds_one_too_long_to_write_is_refused_naming_it() -> None:
    with pytest.raises(InputError, match=r"index must be a whole number .* got a list holding an integer"):
        verify_inclusion(LEAF, [HUGE], 2, [LEAF], LEAF)  # type: ignore[arg-type]
