"""Review R66: booleans beside the numbers 1 and 0 in the capability algebra.

Python has ``True == 1``, ``False == 0`` and ``hash(True) == hash(1)``; the algebra says booleans
are never numbers (docs/policy-reference.md, constraints). Its decisions (``covers``,
``attenuates``, ``witness``, ``intersects``) kept them apart; the equality and hash of
``Constraint`` (and so of ``Capability``) did not: ``x = true`` equalled ``x = 1``,
so a set or a dict of capabilities, or a cache keyed by one, kept one for the other.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import (
    Call,
    Capability,
    Constraint,
    attenuates,
    covers,
    intersects,
    parse_capability,
    witness,
)


def _call(value: object) -> Call:
    return Call.tool("t", {"x": value})


def test_a_boolean_is_never_covered_by_a_number_nor_a_number_by_a_boolean() -> None:
    """Review R66: checked, sound: a capability on ``x = 1``, ``x in {1, 2}``, ``x <= 1``,
    ``x = 0``, ``x >= 0``, ``x = 1.0`` covers no call with ``x: true`` or ``x: false``, and one on
    ``x = true`` or ``x in {true, false}`` no call with ``x: 1``, ``0`` or ``1.0``."""
    numeric = ["x=1", "x=1|2", "x<=1", "x=0", "x>=0", "x=1.0", "x=0|1", "x>-1&x<2"]
    for clause, value in itertools.product(numeric, (True, False)):
        assert not covers(parse_capability(f"tool:t?{clause}"), _call(value)), (clause, value)
    for clause, value in itertools.product(("x=true", "x=false", "x=true|false"), (1, 0, 1.0, 0.0)):
        assert not covers(parse_capability(f"tool:t?{clause}"), _call(value)), (clause, value)
    assert covers(parse_capability("tool:t?x=true|1"), _call(True))
    assert covers(parse_capability("tool:t?x=true|1"), _call(1))
    assert covers(parse_capability("tool:t?x=true|1"), _call(1.0))
    assert not covers(parse_capability("tool:t?x=true|1"), _call(False))
    assert not covers(parse_capability("tool:t?x=true|1"), _call(0))


def test_a_child_naming_the_other_kind_of_value_does_not_attenuate() -> None:
    """Review R66: checked, sound: ``x = 1`` under ``x = true`` (and the reverse, ``x = false``
    under ``x >= 0`` or ``x = 0``) is wider, with a witness call holding the child's value; a set
    ``{true, 1}`` holds both values, and a child naming either attenuates it."""
    for parent, child in [
        ("x=true", "x=1"),
        ("x=1", "x=true"),
        ("x=1|2", "x=true"),
        ("x>=0", "x=false"),
        ("x=0", "x=false"),
        ("x=false", "x=0"),
        ("x=true|1", "x=true|false"),
        ("x=true|1", "x=0|1"),
    ]:
        p, c = parse_capability(f"tool:t?{parent}"), parse_capability(f"tool:t?{child}")
        assert not attenuates(p, c), (parent, child)
        found = witness(p, c)
        assert found is not None and covers(c, found) and not covers(p, found), (parent, child)
    both = parse_capability("tool:t?x=true|1")
    for child in ("x=true", "x=1", "x=1.0", "x=1|true", "x=true|1"):
        assert attenuates(both, parse_capability(f"tool:t?{child}")), child
        assert witness(both, parse_capability(f"tool:t?{child}")) is None, child


def test_sets_keep_a_boolean_beside_the_equal_number_and_drop_true_repeats() -> None:
    """Review R66: checked, sound: a set keeps ``true`` beside ``1`` and ``false`` beside ``0``,
    in the order given; ``1`` and ``1.0`` are one value; a lone member is ``eq`` of its kind."""
    assert Constraint.of({"in": [True, 1, 1.0, True, False, 0]}).one_of == (True, 1, False, 0)
    assert [type(v) for v in Constraint(one_of=(1, True, 1)).one_of or ()] == [int, bool]
    assert type(Constraint(one_of=(True, True)).eq) is bool
    assert type(Constraint.of({"in": [1, 1.0]}).eq) is int
    assert str(parse_capability("tool:t?x=true|1")) == "tool:t?x=true|1"
    assert str(parse_capability("tool:t?x=1|true")) == "tool:t?x=1|true"


def test_a_boolean_and_a_number_never_intersect() -> None:
    """Review R66: checked, sound: no value satisfies both ``x = true`` and a numeric constraint
    (``x = 1``, ``x >= 0``, ``x in {0, 1}``)."""
    for numeric in ({"eq": 1}, {"ge": 0}, {"in": [0, 1]}, {"le": 1, "ge": 1}):
        for boolean in ({"eq": True}, {"eq": False}, {"in": [True, False]}):
            assert not intersects(Constraint.of(numeric), Constraint.of(boolean)), (numeric, boolean)
    assert intersects(Constraint.of({"in": [True, 1]}), Constraint.of({"eq": 1.0}))


def test_equal_constraints_and_capabilities_keep_booleans_and_numbers_apart() -> None:
    """Review R66: ``Constraint(eq=True) == Constraint(eq=1)`` with the same hash, and so
    ``parse_capability('tool:t?x=true') == parse_capability('tool:t?x=1')``, though one allows
    only ``true`` and the other only the number 1: a set of the two capabilities held one, a dict
    keyed by them gave one's entry for the other (as the lint's decision caches and
    ``role_grant_template`` did until review R66). Equality is now ``_same`` value by value:
    booleans are never numbers, ``1`` and ``1.0`` are still one value."""
    pairs = [
        (Constraint(eq=True), Constraint(eq=1)),
        (Constraint(eq=False), Constraint(eq=0)),
        (Constraint(eq=True), Constraint(eq=1.0)),
        (Constraint.of({"in": [True, 2]}), Constraint.of({"in": [1, 2]})),
        (Constraint.of({"in": [1, True]}), Constraint.of({"in": [True, 1]})),
        (Constraint.of({"eq": True, "in": [True, 2]}), Constraint.of({"eq": 1, "in": [1, 2]})),
    ]
    for a, b in pairs:
        assert a != b and b != a, (a, b)
        assert len({a, b}) == 2, (a, b)
    one, true = parse_capability("tool:t?x=1"), parse_capability("tool:t?x=true")
    assert one != true and len({one, true}) == 2 and {one: "n"}.get(true) is None
    assert Constraint(eq=1) == Constraint(eq=1.0) and hash(Constraint(eq=1)) == hash(Constraint(eq=1.0))
    assert Constraint.of({"in": [1, "1"]}) == Constraint(one_of=(1.0, "1"))
    assert parse_capability("tool:t?x=1.0") == one and hash(parse_capability("tool:t?x=1.0")) == hash(one)


_VALUES = [True, False, 1, 0, 1.0, 0.0, 2, -1, "1", "true", ""]
_CONSTRAINTS = st.one_of(
    st.sampled_from(_VALUES).map(lambda v: Constraint(eq=v)),
    st.lists(st.sampled_from(_VALUES), min_size=1, max_size=4).map(lambda vs: Constraint(one_of=tuple(vs))),
    st.tuples(st.sampled_from(_VALUES), st.lists(st.sampled_from(_VALUES), min_size=1, max_size=3)).map(
        lambda p: Constraint(eq=p[0], one_of=tuple(p[1]))
    ),
    st.sampled_from([0, 1, 1.0, 2]).map(lambda v: Constraint(le=v)),
    st.sampled_from([0, 1, 0.0]).map(lambda v: Constraint(ge=v)),
)


@settings(max_examples=400, deadline=None)
@given(_CONSTRAINTS, _CONSTRAINTS)
def test_equal_constraints_allow_the_same_values_and_hash_alike(a: Constraint, b: Constraint) -> None:
    """Review R66: two constraints that compared equal allowed different values (``x = true``
    and ``x = 1``). Equal constraints now allow exactly the same values and hash alike."""
    if a == b:
        assert hash(a) == hash(b)
        assert [a.allows(v) for v in _VALUES] == [b.allows(v) for v in _VALUES], (a, b)
        assert Capability("tool:t", "invoke", (("x", a),)) == Capability("tool:t", "invoke", (("x", b),))
