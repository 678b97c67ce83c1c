"""Review R64: ``covers`` and ``attenuates`` against a brute-force oracle written apart from them.

The oracle reads a constraint in its mapping form (``{"le": 500, "in": [...]}``) as the policy
reference defines each operator, never through ``Constraint``'s normal forms, and decides
attenuation by trying every call of a finite domain built from the values the two capabilities
name: each number they name, the midpoints between them and one beyond either end (as
``Fraction``, since numbers are the reals), both booleans, each string they name with a few
extensions, and a missing argument. Over such a domain "every call the child covers, the parent
covers" is exact: two sets bounded by those values differ, if at all, at one of those points.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import pairwise, product
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import Call, Capability, Constraint, attenuates, covers, intersects, witness
from agentgate.errors import CapabilityError

ARGS = ("a", "b")
INTEGERS = [-(2**63) + 1, -2, -1, 0, 1, 2, 3, 2**63 - 1]
FLOATS = [-1.5, 0.5, 1.0, 1.5, 2.5]
STRINGS = ["", "a", "ab", "abc", "b", "1", "1.0", "true", "é", "e\u0301", "\u0430", "%41", "a|b"]
SCALARS = [*INTEGERS, *FLOATS, *STRINGS, True, False]
MISSING = object()


def _is_number(value: object) -> bool:
    """A finite real: booleans are not numbers, NaN and the infinities are refused."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int | Fraction)


def _same(value: object, other: object) -> bool:
    if isinstance(value, bool) or isinstance(other, bool):
        return isinstance(value, bool) and isinstance(other, bool) and value == other
    if _is_number(value) and _is_number(other):
        return value == other
    return isinstance(value, str) and isinstance(other, str) and value == other


def _holds(op: str, bound: Any, value: object) -> bool:
    """One operator of the policy reference's table, as the table says it."""
    if op == "eq":
        return _same(value, bound)
    if op == "in":
        return any(_same(value, member) for member in bound)
    if op == "prefix":
        return isinstance(value, str) and value.startswith(bound)
    if not _is_number(value):
        return False
    v: Any = value
    return {"lt": v < bound, "le": v <= bound, "gt": v > bound, "ge": v >= bound}[op]


def _oracle_covers(spec: dict[str, dict[str, Any]], args: dict[str, object]) -> bool:
    return all(
        name in args and all(_holds(op, bound, args[name]) for op, bound in ops.items())
        for name, ops in spec.items()
    )


def _domain(*specs: dict[str, dict[str, Any]]) -> list[object]:
    """Values enough to tell any two constraints built from what ``specs`` name apart."""
    numbers: set[Fraction] = {Fraction(0)}
    strings: set[str] = {"zz-oracle"}
    for spec in specs:
        for ops in spec.values():
            for op, bound in ops.items():
                for v in bound if op == "in" else [bound]:
                    if _is_number(v):
                        numbers.add(Fraction(v))
                    elif isinstance(v, str):
                        strings.update({v, v + "\x00", v + "z", v + "\uffff"})
    ordered = sorted(numbers)
    reals = [ordered[0] - 1, ordered[-1] + 1, *ordered]
    reals += [(x + y) / 2 for x, y in pairwise(ordered)]
    return [*reals, *sorted(strings), True, False, MISSING]


def _oracle_attenuates(parent: dict[str, dict[str, Any]], child: dict[str, dict[str, Any]]) -> bool:
    """Every call of the domain that the child covers, the parent covers (same resource and action)."""
    domain = _domain(parent, child)
    for values in product(domain, repeat=len(ARGS)):
        args = {name: v for name, v in zip(ARGS, values, strict=True) if v is not MISSING}
        if _oracle_covers(child, args) and not _oracle_covers(parent, args):
            return False
    return True


NUMBERS = st.sampled_from([*INTEGERS, *FLOATS])
OPERATOR = st.one_of(
    st.tuples(st.just("eq"), st.sampled_from(SCALARS)),
    st.tuples(st.just("in"), st.lists(st.sampled_from(SCALARS), min_size=1, max_size=3)),
    st.tuples(st.sampled_from(["lt", "le", "gt", "ge"]), NUMBERS),
    st.tuples(st.just("prefix"), st.sampled_from(STRINGS)),
)
SPEC = st.dictionaries(
    st.sampled_from(ARGS), st.lists(OPERATOR, min_size=1, max_size=3).map(dict), max_size=2
)
CALL_VALUES = st.sampled_from(
    [*SCALARS, 2**63, -(2**63), 2**64, float(2**63), -0.0, math.nan, math.inf, -math.inf, 1.25, "abcd", "A"]
)
CALL_ARGS = st.dictionaries(st.sampled_from([*ARGS, "z"]), CALL_VALUES, max_size=3)


def _capability(spec: dict[str, dict[str, Any]]) -> Capability:
    return Capability.of("tool:x", "invoke", spec)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(SPEC, CALL_ARGS)
def test_covers_agrees_with_the_operator_table(
    spec: dict[str, dict[str, Any]], args: dict[str, object]
) -> None:
    """Review R64: ``covers`` holds exactly when every operator of the policy reference's table
    holds on the call's argument (missing: never; extra arguments: ignored), over values around
    2**63, booleans beside 1 and 0, numeric-looking strings, NaN and the infinities."""
    assert covers(_capability(spec), Call("tool:x", "invoke", args)) is _oracle_covers(spec, args)


@settings(max_examples=250, deadline=None, derandomize=True)
@given(SPEC, SPEC)
def test_attenuates_agrees_with_brute_force_inclusion(
    parent: dict[str, dict[str, Any]], child: dict[str, dict[str, Any]]
) -> None:
    """Review R64: ``attenuates(parent, child)`` is True exactly when every call of the oracle's
    domain that the child covers, the parent covers: for every operator pair, conjunctions of up
    to three operators on one argument and constraints on two arguments, contradictory children
    (which cover nothing, so attenuate anything) included; and ``witness`` finds no call exactly
    when attenuation holds (the pools hold no bounds that only a non-double real separates)."""
    p, c = _capability(parent), _capability(child)
    expected = _oracle_attenuates(parent, child)
    assert attenuates(p, c) is expected
    found = witness(p, c)
    assert (found is None) is expected
    if found is not None:
        assert covers(c, found) and not covers(p, found)


OPERATORS = st.lists(OPERATOR, min_size=1, max_size=3).map(dict)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(OPERATORS, OPERATORS)
def test_intersects_agrees_with_brute_force(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Review R64: ``intersects(a, b)`` (what the linter relies on) holds exactly when some value
    of the oracle's domain satisfies every operator of both, and ``is_empty`` exactly when none
    satisfies one of them."""
    domain = [v for v in _domain({"a": a}, {"a": b}) if v is not MISSING]
    x, y = Constraint.of(a), Constraint.of(b)
    assert intersects(x, y) is any(_oracle_covers({"a": a, "b": b}, {"a": v, "b": v}) for v in domain)
    assert x.is_empty is not any(_oracle_covers({"a": a}, {"a": v}) for v in domain)


def test_a_child_that_admits_nothing_attenuates_any_parent_as_documented() -> None:
    """Review R64: a contradictory child (``a>=1&a<1``, ``a=x&a^=y``, a number and a prefix)
    covers no call, so it attenuates every parent, even one for another resource and action, as
    docs/policy-reference.md says; it is not refused where it is built."""
    parent = Capability.of("model:m", "generate", {"b": {"eq": 1}})
    for spec in (
        {"ge": 1, "lt": 1},
        {"eq": "x", "prefix": "y"},
        {"le": 5, "prefix": ""},
        {"in": [1, 2], "gt": 2},
    ):
        child = Capability.of("tool:other", "*", {"a": spec})
        assert child.constraint_map["a"].is_empty
        assert attenuates(parent, child)
        assert witness(parent, child) is None
        assert not covers(child, Call("tool:other", "invoke", {"a": 1}))


@pytest.mark.parametrize(
    "spec",
    [{"in": []}, {"in": ()}, {}, {"le": -(2**63)}, {"ge": 2**63}, {"eq": True, "lt": True}, {"prefix": 1}],
)
def test_an_empty_set_and_out_of_range_bounds_are_refused(spec: dict[str, Any]) -> None:
    """Review R64: an empty one-of set cannot be built (it would be a contradiction spelled as a
    value), nor an integer at -2**63 or 2**63 (``|v| < 2**63``), nor a boolean bound."""
    with pytest.raises(CapabilityError):
        Constraint.of(spec)


def test_the_bounds_at_the_integer_limits_compare_exactly() -> None:
    """Review R64: 2**63 - 1 and -(2**63 - 1) are bounds, compared exactly with integers and
    floats beyond them (``float(2**63)`` is above the bound, not rounded onto it)."""
    cap = _capability({"a": {"le": 2**63 - 1, "ge": -(2**63) + 1}})
    for value, allowed in (
        (2**63 - 1, True),
        (2**63, False),
        (float(2**63), False),
        (-(2**63), False),
        (0, True),
    ):
        assert covers(cap, Call("tool:x", "invoke", {"a": value})) is allowed, value
