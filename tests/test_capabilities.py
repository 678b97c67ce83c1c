"""The capability algebra: exact covers/attenuates, canonical names, the one-line grammar."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import (
    OPERATORS,
    Call,
    Capability,
    Constraint,
    attenuates,
    canonical_resource,
    capability_from_canonical,
    covers,
    format_capability,
    parse_capability,
    pattern_within,
    witness,
)
from agentgate.capabilities import _same as same_value_and_kind
from agentgate.errors import CapabilityError

# --- strategies -----------------------------------------------------------------------------------

NUMBERS = st.one_of(st.integers(-20, 20), st.sampled_from([-1.5, 0.5, 2.5, 7.25, 10.0]))
STRINGS = st.sampled_from(["", "a", "ab", "abc", "b", "ba", "EUR", "USD"])
SCALARS = st.one_of(NUMBERS, STRINGS, st.booleans())
FIELDS = st.sampled_from(["amount", "currency", "x"])


@st.composite
def constraint_specs(draw: st.DrawFn) -> dict[str, object]:
    ops = draw(
        st.sets(st.sampled_from(["eq", "in", "lt", "le", "gt", "ge", "prefix"]), min_size=1, max_size=3)
    )
    spec: dict[str, object] = {}
    for op in ops:
        if op == "eq":
            spec[op] = draw(SCALARS)
        elif op == "in":
            spec[op] = draw(st.lists(SCALARS, min_size=1, max_size=4))
        elif op == "prefix":
            spec[op] = draw(STRINGS)
        else:
            spec[op] = draw(NUMBERS)
    return spec


RESOURCES = st.sampled_from(
    ["tool:*", "tool:search.*", "tool:search.web", "tool:search.web.deep", "tool:pay.refund"]
)


@st.composite
def capabilities(draw: st.DrawFn) -> Capability:
    fields = draw(st.dictionaries(FIELDS, constraint_specs(), max_size=2))
    action = draw(st.sampled_from(["invoke", "invoke", "*"]))
    return Capability.of(draw(RESOURCES), action, fields)


@st.composite
def calls(draw: st.DrawFn) -> Call:
    resource = draw(
        st.sampled_from(["tool:search.web", "tool:search.web.deep", "tool:search", "tool:pay.refund"])
    )
    args = draw(st.dictionaries(FIELDS, SCALARS, max_size=3))
    return Call(resource, draw(st.sampled_from(["invoke", "read"])), args)


# --- properties ------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(capabilities(), capabilities())
def test_attenuates_is_exact_with_a_witness(parent: Capability, child: Capability) -> None:
    """When attenuation fails, the witness is a call the child allows and the parent refuses."""
    found = witness(parent, child)
    assert attenuates(parent, child) == (found is None)
    if found is not None:
        assert covers(child, found), (child, found)
        assert not covers(parent, found), (parent, found)


@settings(max_examples=400, deadline=None)
@given(capabilities(), capabilities(), calls())
def test_an_attenuated_child_never_covers_more(parent: Capability, child: Capability, call: Call) -> None:
    if attenuates(parent, child) and covers(child, call):
        assert covers(parent, call)


@settings(max_examples=200, deadline=None)
@given(capabilities(), capabilities(), capabilities())
def test_attenuation_is_transitive(a: Capability, b: Capability, c: Capability) -> None:
    if attenuates(a, b) and attenuates(b, c):
        assert attenuates(a, c)


@settings(max_examples=200, deadline=None)
@given(capabilities())
def test_attenuation_is_reflexive_and_serialization_round_trips(cap: Capability) -> None:
    assert attenuates(cap, cap)
    assert Capability.from_dict(cap.to_dict()) == cap
    assert parse_capability(format_capability(cap)) == cap


@settings(max_examples=300, deadline=None)
@given(constraint_specs(), SCALARS)
def test_normal_form_agrees_with_the_operators(spec: dict[str, object], value: object) -> None:
    """The normalized constraint allows exactly what every operator allows."""
    c = Constraint.of(spec)
    direct = True
    number = isinstance(value, int | float) and not isinstance(value, bool)
    for op, bound in spec.items():
        if op == "eq":
            direct &= _same(value, bound)
        elif op == "in":
            direct &= any(_same(value, v) for v in bound)  # type: ignore[attr-defined]
        elif op == "prefix":
            direct &= isinstance(value, str) and value.startswith(bound)  # type: ignore[arg-type]
        else:
            cmp = {"lt": float.__lt__, "le": float.__le__, "gt": float.__gt__, "ge": float.__ge__}[op]
            direct &= number and cmp(float(value), float(bound))  # type: ignore[arg-type]
    assert c.allows(value) == direct


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b and (isinstance(a, str) == isinstance(b, str))


# --- rules -----------------------------------------------------------------------------------------


def test_wider_constraint_is_scope_creep() -> None:
    parent = parse_capability("tool:payments.refund?amount<=500&currency=EUR|USD")
    wider = parse_capability("tool:payments.refund?amount<=600&currency=EUR")
    assert not attenuates(parent, wider)
    assert witness(parent, wider) == Call(
        "tool:payments.refund", "invoke", {"amount": 600, "currency": "EUR"}
    )


def test_dropping_a_constraint_is_scope_creep() -> None:
    parent = parse_capability("tool:payments.refund?amount<=500")
    assert not attenuates(parent, parse_capability("tool:payments.refund"))


def test_an_interval_is_never_inside_a_finite_set_over_the_reals() -> None:
    parent = parse_capability("tool:t?n=1|2")
    assert not attenuates(parent, parse_capability("tool:t?n>=1&n<=2"))
    assert attenuates(parent, parse_capability("tool:t?n>=1&n<=1"))


def test_wildcards_narrow_only_downwards() -> None:
    assert pattern_within("tool:search.web.*", "tool:search.*")
    assert pattern_within("tool:search.web", "tool:*")
    assert not pattern_within("tool:search.*", "tool:search.web.*")
    assert not pattern_within("tool:search", "tool:search.*")
    assert not pattern_within("model:*", "tool:*")


def test_booleans_are_not_numbers() -> None:
    cap = parse_capability("tool:t?n<=5&flag=true")
    assert covers(cap, Call.tool("t", {"n": 1, "flag": True}))
    assert not covers(cap, Call.tool("t", {"n": True, "flag": True}))
    assert not covers(cap, Call.tool("t", {"n": 1, "flag": 1}))


def test_a_missing_argument_is_not_covered() -> None:
    assert not covers(parse_capability("tool:t?n<=5"), Call.tool("t", {}))


def test_non_finite_values_are_refused() -> None:
    for bad in (math.nan, math.inf, -math.inf, 2**63):
        with pytest.raises(CapabilityError):
            Constraint.of({"le": bad})
    assert not covers(parse_capability("tool:t?n<=5"), Call.tool("t", {"n": math.nan}))


@pytest.mark.parametrize(
    "name",
    [
        "Run_Shell",
        " run_shell",
        "run_shell\n",
        "run\u200bshell",
        "run_she\u0131l",
        "../run_shell",
        "a..b",
        "run shell",
        "",
    ],
)
def test_ambiguous_tool_names_are_refused(name: str) -> None:
    with pytest.raises(CapabilityError):
        canonical_resource(f"tool:{name}")


def test_model_names_may_use_hub_spelling() -> None:
    assert canonical_resource("model:Qwen/Qwen3-32B") == "model:Qwen/Qwen3-32B"
    assert canonical_resource("model:llama-3.1-8b") == "model:llama-3.1-8b"


@pytest.mark.parametrize(
    "text",
    [
        "tool:t?amount",
        "tool:t?amount<=abc",
        "tool:t?amount<=1&amount<=2",
        "nope:t",
        "tool:T",
        "tool:t#Bad",
        "tool:t?=1",
    ],
)
def test_malformed_capability_strings_are_typed_errors(text: str) -> None:
    with pytest.raises(CapabilityError):
        parse_capability(text)


def test_one_line_grammar_quotes_and_types() -> None:
    cap = parse_capability('tool:t?code="500"&n=500&ok=true&path^=%2Fhome%2F')
    assert cap.constraint_map["code"].eq == "500"
    assert cap.constraint_map["n"].eq == 500
    assert cap.constraint_map["ok"].eq is True
    assert cap.constraint_map["path"].prefix == "/home/"
    assert parse_capability(str(cap)) == cap


def test_contradictory_child_covers_nothing_and_attenuates() -> None:
    child = parse_capability("tool:t?n<1&n>2")
    assert child.constraint_map["n"].is_empty
    assert attenuates(parse_capability("tool:t?n=7"), child)


# --- building from a token's canonical form -----------------------------------------------------------------

TOKEN_VALUES = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([2**63 - 1, 2**63, -(2**63) + 1, -(2**63), 0, 1]),
    st.sampled_from(["EUR", "USD", "", "a", "1"]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
)
SMALL = st.one_of(st.integers(-3, 3), st.sampled_from(["EUR", "USD", "a"]))
TOKEN_SPECS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "eq": SMALL,
            "in": st.lists(SMALL, max_size=3),
            "le": st.integers(-3, 3),
            "gt": st.integers(-3, 3),
            "prefix": st.sampled_from(["", "a", "EU"]),
        },
    ),
    st.dictionaries(
        st.sampled_from([*OPERATORS, "ne"]), st.one_of(SMALL, st.lists(SMALL, max_size=2)), max_size=2
    ),
    st.dictionaries(
        st.sampled_from([*OPERATORS, "ne"]),
        st.one_of(TOKEN_VALUES, st.lists(TOKEN_VALUES, max_size=3), st.tuples(TOKEN_VALUES)),
        max_size=3,
    ),
)
TOKEN_CAPABILITIES = st.one_of(
    st.builds(lambda cap: cap.to_dict(), capabilities()),
    st.fixed_dictionaries(
        {
            "resource": st.sampled_from(
                ["tool:pay.refund"] * 4 + ["tool:search.*", "tool:*", "Tool:x", "tool:a/b", 1]
            ),
            "action": st.sampled_from(["invoke"] * 4 + ["*", "", "Invoke", None]),
            "constraints": st.dictionaries(
                st.sampled_from(["amount", "currency", "a.b", "1x"]), TOKEN_SPECS, max_size=3
            ),
        }
    ),
    st.dictionaries(st.sampled_from(["resource", "action", "constraints", "x"]), TOKEN_VALUES, max_size=4),
)


def _reference_from_token(data: object) -> Capability | None:
    """What grant parsing accepted before the fast path: ``from_dict``, then the canonical-form check."""
    try:
        cap = Capability.from_dict(data)  # type: ignore[arg-type]
    except CapabilityError:
        return None
    return cap if cap.to_dict() == data else None


@settings(max_examples=500, deadline=None)
@given(TOKEN_CAPABILITIES)
def test_building_from_canonical_form_agrees_with_from_dict(data: dict[str, object]) -> None:
    """A capability built by the fast path is one the reference steps accept, with equal fields,
    types and normal forms; values it is unsure of are left to the reference steps."""
    fast = capability_from_canonical(data)
    if fast is None:
        return
    reference = _reference_from_token(data)
    assert reference is not None, data
    assert repr(fast) == repr(reference) and fast == reference
    assert [repr(c._normal) for _, c in fast.constraints] == [
        repr(c._normal) for _, c in reference.constraints
    ]


def test_building_from_canonical_form_takes_the_token_shapes() -> None:
    for text in ("tool:pay.refund?amount<=500&currency=EUR|USD", "tool:*#*", "tool:x?s^=ab&n>0&n<=9&k=1|x"):
        cap = parse_capability(text)
        assert capability_from_canonical(cap.to_dict()) == cap
    for refused in ({"in": ["EUR"]}, {"in": ["EUR", "EUR"]}, {"le": 1.5}, {"eq": True}, {"le": 2**63}):
        data = {"resource": "tool:x", "action": "invoke", "constraints": {"a": refused}}
        assert capability_from_canonical(data) is None


# --- membership of normal forms -------------------------------------------------------------------------------


class _Str(str):
    pass


class _Int(int):
    pass


QUERIES = st.one_of(
    SCALARS,
    st.sampled_from(
        [math.inf, -math.inf, math.nan, 10**400, -(10**400), 2**53 + 1, 1.0, _Str("EUR"), _Int(1)]
    ),
)
MEMBERS = st.one_of(SCALARS, st.sampled_from([_Str("EUR"), _Int(1), 1.0, 0.0, -0.0]))


@settings(max_examples=500, deadline=None)
@given(st.lists(MEMBERS, min_size=1, max_size=4), QUERIES)
def test_finite_membership_is_same_value_and_kind(values: list[object], query: object) -> None:
    """Set lookups for plain strings and numbers answer exactly as comparing one by one would."""
    finite = (
        Constraint.of({"in": values})._normal if len(values) > 1 else Constraint.of({"eq": values[0]})._normal
    )
    members = getattr(finite, "values", ())
    assert finite.contains(query) == any(same_value_and_kind(query, v) for v in members)


def test_a_huge_integer_argument_is_compared_exactly_not_a_crash() -> None:
    cap = parse_capability("tool:x?a<=5&b=1|2&c>=5")
    assert not covers(cap, Call("tool:x", "invoke", {"a": 10**400, "b": 1, "c": 10**400}))
    assert covers(cap, Call("tool:x", "invoke", {"a": -(10**400), "b": 1, "c": 10**400}))
    assert not covers(cap, Call("tool:x", "invoke", {"a": 1, "b": 10**400, "c": 10**400}))
    assert not Constraint.of({"le": 5}).allows(math.nan) and not Constraint.of({"ge": 5}).allows(math.inf)


def test_subclassed_values_keep_their_kind_in_sets() -> None:
    """The general rule holds among plain values too: a string equals only a string of the same
    type, a number any number of equal value (an int subclass included), never a boolean."""
    assert not Constraint.of({"in": [_Str("EUR"), "USD"]}).allows("EUR")
    assert Constraint.of({"in": [_Int(1), 2]}).allows(1)
    assert Constraint.of({"in": ["EUR", 1]}).allows(1.0) and not Constraint.of({"in": ["EUR", 1]}).allows(
        True
    )
