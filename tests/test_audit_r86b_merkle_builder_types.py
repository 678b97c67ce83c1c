"""Review R86b: R86 refused a size or index that is no integer in ``verify_inclusion`` and
``verify_consistency``, but not in the proof builders: ``inclusion_proof``, ``consistency_proof``
(exported by ``agentgate.audit``), ``inclusion_ranges`` and ``consistency_ranges`` failed on a
string or ``None`` with a bare ``TypeError`` and built a proof for the float 2.0. Rule: the
same ``InputError`` naming the argument; an integer outside the tree is still a ``ValueError``,
as their docstrings say."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.audit import consistency_proof, inclusion_proof
from agentgate.audit.merkle import consistency_ranges, inclusion_ranges, leaf_hash
from agentgate.errors import InputError

LEAVES = [leaf_hash(bytes([i])) for i in range(5)]

BUILDERS: list[tuple[str, Callable[[object], object]]] = [
    ("index", lambda bad: inclusion_proof(LEAVES, bad)),  # type: ignore[arg-type]
    ("index", lambda bad: inclusion_ranges(bad, 5)),  # type: ignore[arg-type]
    ("size", lambda bad: inclusion_ranges(1, bad)),  # type: ignore[arg-type]
    ("size1", lambda bad: consistency_proof(LEAVES, bad)),  # type: ignore[arg-type]
    ("size1", lambda bad: consistency_ranges(bad, 5)),  # type: ignore[arg-type]
    ("size2", lambda bad: consistency_ranges(2, bad)),  # type: ignore[arg-type]
]
"""Each builder with an argument to give wrong; ``None`` is the default of ``inclusion_proof``'s
``size`` and ``consistency_proof``'s ``size2`` (all the leaves), so they are given the rest."""

DEFAULTED: list[tuple[str, Callable[[object], object]]] = [
    ("size", lambda bad: inclusion_proof(LEAVES, 1, bad)),  # type: ignore[arg-type]
    ("size2", lambda bad: consistency_proof(LEAVES, 2, bad)),  # type: ignore[arg-type]
]


def _refused(name: str, build: Callable[[object], object], bad: object) -> None:
    with pytest.raises(InputError) as refused:
        build(bad)
    assert str(refused.value) == f"Merkle proof check: {name} must be a whole number (an int), got {bad!r}"


@pytest.mark.parametrize(("name", "build"), BUILDERS)
@pytest.mark.parametrize("bad", [2.0, "2", None, b"2"])
def test_a_size_or_index_that_is_no_integer_is_refused_naming_it(
    name: str, build: Callable[[object], object], bad: object
) -> None:
    _refused(name, build, bad)


@pytest.mark.parametrize(("name", "build"), DEFAULTED)
@pytest.mark.parametrize("bad", [2.0, "2", b"2"])
def test_a_size_that_defaults_to_all_leaves_is_refused_when_no_integer(
    name: str, build: Callable[[object], object], bad: object
) -> None:
    _refused(name, build, bad)


def test_an_integer_outside_the_tree_is_still_a_value_error() -> None:
    for build in (
        lambda: inclusion_proof(LEAVES, 5),
        lambda: inclusion_ranges(5, 5),
        lambda: consistency_proof(LEAVES, 0),
        lambda: consistency_ranges(3, 2),
    ):
        with pytest.raises(ValueError):
            build()
