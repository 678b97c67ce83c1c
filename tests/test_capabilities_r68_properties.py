"""Review R68: the soundness of the capability algebra, checked on concrete calls.

``attenuates(parent, child)`` must mean that every call the child covers, the parent covers.
Here that is checked by *calls*, never by the algebra's own normal forms: capabilities with
every operator, every resource kind, wildcards and ``*`` actions, against calls whose values
sit next to every bound (the integers and doubles on either side of it, past 2**53 and near
2**63), booleans beside ``0`` and ``1``, ``-0.0``, numeric-looking and decomposed text, NaN,
nested values and ``None``, on canonical and non-canonical resource names. Also: attenuation is
transitive and reflexive, ``witness`` finds a call exactly when one is there to find among them,
equal capabilities hash and cover alike, and the policy index's compiled numeric check (what a
decision runs for a rule of bounds only) agrees with ``Constraint.allows``.

All of these held when written (review R68 found no counterexample in 30,000 draws each); they
are kept so that a change to the algebra meets them. The first fails on each one-line break of
the algebra tried: either bound of an interval, or its openness, ignored in ``_subset``; a
prefix or a set included the wrong way round; a wildcard child taken within an exact parent; a
``*`` child taken within a parent of one action. (The R64 oracle, whose random specs are mostly
contradictions, misses the first three.)
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgate.capabilities import Call, Capability, Constraint, attenuates, covers, witness
from agentgate.policy._index import _compile, _passes

CHECKS = settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

BOUNDS: list[int | float] = [
    0,
    1,
    5,
    2**53 - 1,
    2**53,
    2**53 + 1,
    2**60,
    2**60 + 1,
    2**63 - 1,
    0.5,
    4.999999999999999,
    5.000000000000001,
    float(2**53),
    float(2**60),
    9.2e18,
    1e-300,
    5e-324,
    -0.0,
]
NUMBERS = st.sampled_from([*BOUNDS, *(-b for b in BOUNDS)])
TEXTS = ["", "a", "ab", "1", "true", "é", "e\u0301", "A", "\uff41"]
VALUES = st.one_of(NUMBERS, st.sampled_from([*TEXTS, True, False]))
OPERATOR = st.one_of(
    st.tuples(st.just("eq"), VALUES),
    st.tuples(st.just("in"), st.lists(VALUES, min_size=1, max_size=4)),
    st.tuples(st.sampled_from(["lt", "le", "gt", "ge"]), NUMBERS),
    st.tuples(st.just("prefix"), st.sampled_from(TEXTS)),
)
SPEC = st.dictionaries(
    st.sampled_from(["a", "b"]), st.lists(OPERATOR, min_size=1, max_size=3).map(dict), max_size=2
)
PATTERNS = [
    "tool:*",
    "tool:a",
    "tool:a.*",
    "tool:a.b",
    "tool:a.b.*",
    "tool:ab",
    "tool:ab.*",
    "model:*",
    "model:a.*",
    "model:a.b",
    "gpu:*",
    "gpu:h100",
]
CAPABILITY = st.builds(
    Capability.of, st.sampled_from(PATTERNS), st.sampled_from(["invoke", "generate", "read", "*"]), SPEC
)
RESOURCES = [
    *(p for p in PATTERNS if not p.endswith("*")),
    "tool:a.b.c",
    "tool:a.b-c",
    "tool:a..b",
    "tool:A.b",
    "tool:a.b.",
    "tool:a.b\n",
    "tool:a.*",
    "model:a.b/c",
    "model:a.b:c",
    "model:A.b",
    "gpu:H100",
]


def _near(spec: dict[str, dict[str, Any]]) -> set[object]:
    """The integers and doubles on either side of every number ``spec`` names, and its texts
    with one more character."""
    out: set[object] = set()
    for ops in spec.values():
        for op, given_value in ops.items():
            for v in given_value if op == "in" else [given_value]:
                if isinstance(v, str):
                    out.update({v, v + "z", v + "\x00"})
                elif not isinstance(v, bool):
                    below = above = float(v)
                    out.add(below)
                    for _ in range(2):
                        below, above = math.nextafter(below, -math.inf), math.nextafter(above, math.inf)
                        out.update({below, above})
                    out.update(math.floor(v) + k for k in range(-2, 3))
    return out


OTHER_VALUES: list[object] = [True, False, 0, "", "b", None, [1], {"a": 1}, math.nan, math.inf, 10**30, 1e300]


def _calls(parent: dict[str, Any], child: dict[str, Any]) -> list[Call]:
    pool = [*_near(parent), *_near(child), *OTHER_VALUES]
    calls = []
    for resource in RESOURCES:
        for action in ("invoke", "generate", "read"):
            calls.append(Call(resource, action, {}))
    for i, v in enumerate(pool):
        w = pool[(i * 7 + 3) % len(pool)]
        for args in ({"a": v}, {"a": v, "b": w}, {"b": v}, {"a": w, "b": v, "c": 1}):
            for resource in ("tool:a.b", "tool:a.b.c", "model:a.b", "gpu:h100"):
                calls.append(Call(resource, "invoke", args))
                calls.append(Call(resource, "generate", args))
    return calls


NEAR_PATTERNS = st.sampled_from(["tool:a.b", "tool:a.b", "tool:a.*", "tool:*", "model:a.b"])
"""Mostly patterns that hold one another, so that the constraints decide."""
BOUNDS_ONLY = st.lists(st.tuples(st.sampled_from(["lt", "le", "gt", "ge"]), NUMBERS), min_size=1, max_size=2)
CONSTRAINT = st.one_of(
    BOUNDS_ONLY.map(dict),
    BOUNDS_ONLY.map(dict),
    st.lists(OPERATOR.filter(lambda op: op[0] in ("eq", "in")), min_size=1, max_size=1).map(dict),
    st.tuples(st.just("prefix"), st.sampled_from(TEXTS)).map(lambda op: dict([op])),
    st.lists(OPERATOR, min_size=1, max_size=3).map(dict),
)
"""Each normal form about as often (bounds alone give intervals; a random mix is mostly empty)."""
ONE_ARGUMENT = st.fixed_dictionaries({"a": CONSTRAINT}, optional={"b": CONSTRAINT})


ACTIONS = st.sampled_from(["invoke", "invoke", "generate", "*"])
_FLIPPED = {"lt": "le", "le": "lt", "gt": "ge", "ge": "gt"}


def _flip(spec: dict[str, Any], which: list[bool]) -> dict[str, Any]:
    """``spec`` with each bound (in turn, where ``which`` says) open instead of closed or the
    other way round: a child at the very bounds of its parent."""
    flips = iter(which)
    return {
        name: {(_FLIPPED[op] if op in _FLIPPED and next(flips, False) else op): v for op, v in ops.items()}
        for name, ops in spec.items()
    }


@st.composite
def _parent_and_child(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    parent = draw(ONE_ARGUMENT)
    if draw(st.booleans()):
        return parent, draw(ONE_ARGUMENT)
    return parent, _flip(parent, draw(st.lists(st.booleans(), min_size=4, max_size=4)))


@settings(CHECKS, max_examples=800)
@given(NEAR_PATTERNS, NEAR_PATTERNS, ACTIONS, ACTIONS, _parent_and_child())
def test_a_child_that_attenuates_covers_no_call_its_parent_does_not(
    parent_resource: str,
    child_resource: str,
    parent_action: str,
    child_action: str,
    specs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Review R68: whenever ``attenuates(parent, child)``, no call of the pool (values next to
    every bound, other kinds, other resources and actions) is covered by the child and not by the
    parent; whenever such a call is in the pool, ``witness`` gives one; and a witness is always
    such a call."""
    parent_spec, child_spec = specs
    parent = Capability.of(parent_resource, parent_action, parent_spec)
    child = Capability.of(child_resource, child_action, child_spec)
    escaping = [
        call for call in _calls(parent_spec, child_spec) if covers(child, call) and not covers(parent, call)
    ]
    found = witness(parent, child)
    if attenuates(parent, child):
        assert not escaping, (str(parent), str(child), escaping[:3])
        assert found is None
    if escaping:
        assert found is not None, (str(parent), str(child), escaping[:3])
    if found is not None:
        assert covers(child, found) and not covers(parent, found)


@CHECKS
@given(CAPABILITY, CAPABILITY, CAPABILITY)
def test_attenuation_is_reflexive_and_transitive(a: Capability, b: Capability, c: Capability) -> None:
    """Review R68: a capability attenuates itself, and a chain of attenuations is one."""
    assert attenuates(a, a) and witness(a, a) is None
    if attenuates(a, b) and attenuates(b, c):
        assert attenuates(a, c), (str(a), str(b), str(c))


@CHECKS
@given(CAPABILITY, CAPABILITY)
def test_equal_capabilities_hash_and_cover_alike(a: Capability, b: Capability) -> None:
    """Review R68: equality never joins two capabilities that allow different calls (a set, a
    dict or a role's grant keyed by one would give the one for the other), and the one-line and
    mapping forms give back an equal capability."""
    for cap in (a, b):
        assert Capability.parse(str(cap)) == cap
        assert Capability.from_dict(cap.to_dict()) == cap
    if a == b:
        assert hash(a) == hash(b)
        for call in _calls({}, {}):
            assert covers(a, call) is covers(b, call)


@CHECKS
@given(
    st.lists(st.tuples(st.sampled_from(["lt", "le", "gt", "ge"]), NUMBERS), min_size=1, max_size=4).map(dict)
)
def test_the_policy_index_checks_bounds_as_the_constraint_does(spec: dict[str, Any]) -> None:
    """Review R68: a rule of numeric bounds only is compiled by the policy index into inline
    comparisons (``_compile``/``_passes``); they allow exactly what ``Constraint.allows`` allows,
    for values next to each bound, booleans, NaN, infinities, huge integers, text and lists."""
    constraint = Constraint.of(spec)
    rule = SimpleNamespace(capability=Capability.of("tool:x", "invoke", {"a": spec}), allowed_by="rule")
    compiled = _compile(rule)  # type: ignore[arg-type]
    for value in [*_near({"a": spec}), *OTHER_VALUES, -math.inf, "1", 2**63, -(2**63)]:
        assert _passes(compiled, {"a": value}) is constraint.allows(value), (spec, value)
    assert not _passes(compiled, {})
