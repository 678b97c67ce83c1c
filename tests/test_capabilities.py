"""The capability algebra: exact covers/attenuates, canonical names, the one-line grammar."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_authority_grants import (  # noqa: F401 (repo is a fixture)
    ALICE_KEY,
    BOB_KEY,
    NOW,
    ROOT_KEY,
    _body,
    _decide,
    _linked_token,
    _refusal,
    repo,
)

from agentgate.authority import GrantRepository, Outcome, delegate, issue
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
    pattern_matches,
    pattern_within,
    witness,
)
from agentgate.capabilities._values import _same as same_value_and_kind
from agentgate.errors import CapabilityError, ScopeCreep

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


# Wide values (review R55): the edges the narrow strategies above never reach: integers past 2**53
# and near 2**63, -0.0, subnormal and huge doubles, booleans beside 0 and 1, non-ASCII and
# look-alike text, and call resources that are not canonical.
WIDE_NUMBERS = st.one_of(
    NUMBERS,
    st.integers(-(2**63) + 1, 2**63 - 1),
    st.sampled_from([0, 1, -0.0, 2**53, 2**53 + 1, 2**62, 2**63 - 1, -(2**63) + 1, 5e-324, 1e300, -1e300]),
)
WIDE_STRINGS = st.one_of(
    STRINGS,
    st.sampled_from(["caf\u00e9", "cafe\u0301", "\uff41", "a\u200b", "a\n", "\x00", "\U0001f600", "../"]),
)
WIDE_SCALARS = st.one_of(WIDE_NUMBERS, WIDE_STRINGS, st.booleans())


@st.composite
def wide_constraint_specs(draw: st.DrawFn) -> dict[str, object]:
    ops = draw(
        st.sets(st.sampled_from(["eq", "in", "lt", "le", "gt", "ge", "prefix"]), min_size=1, max_size=3)
    )
    spec: dict[str, object] = {}
    for op in ops:
        if op == "eq":
            spec[op] = draw(WIDE_SCALARS)
        elif op == "in":
            spec[op] = draw(st.lists(WIDE_SCALARS, min_size=1, max_size=4))
        elif op == "prefix":
            spec[op] = draw(WIDE_STRINGS)
        else:
            spec[op] = draw(WIDE_NUMBERS)
    return spec


@st.composite
def wide_capabilities(draw: st.DrawFn) -> Capability:
    fields = draw(st.dictionaries(FIELDS, wide_constraint_specs(), max_size=2))
    resource = draw(st.one_of(RESOURCES, st.sampled_from(["model:*", "model:a.*", "model:a/b", "gpu:*"])))
    return Capability.of(resource, draw(st.sampled_from(["invoke", "*", "generate"])), fields)


@st.composite
def wide_calls(draw: st.DrawFn) -> Call:
    resource = draw(
        st.sampled_from(
            [
                *("tool:search.web", "tool:search.web.deep", "tool:pay.refund", "model:a/b", "model:a.b"),
                *("gpu:h100", "tool:search.web\n", "tool:Search.web", "tool:search..web"),
                *("tool:search.\u200bweb", "tool:*"),
            ]
        )
    )
    args = draw(st.dictionaries(FIELDS, WIDE_SCALARS, max_size=3))
    return Call(resource, draw(st.sampled_from(["invoke", "generate"])), args)


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


@settings(max_examples=400, deadline=None)
@given(wide_capabilities(), wide_capabilities(), wide_calls())
def test_an_attenuated_child_never_covers_more_over_wide_values(
    parent: Capability, child: Capability, call: Call
) -> None:
    """Review R55: the properties over wide values; a witness, where there is one, is a call the
    child covers and the parent does not, and a non-canonical resource is covered by nothing."""
    if attenuates(parent, child) and covers(child, call):
        assert covers(parent, call)
    found = witness(parent, child)
    if found is not None:
        assert not attenuates(parent, child)
        assert covers(child, found) and not covers(parent, found)
    if covers(parent, call):
        assert canonical_resource(call.resource) == call.resource
    assert parse_capability(format_capability(child)) == child
    assert Capability.from_dict(child.to_dict()) == child


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


@pytest.mark.parametrize(
    "resource",
    [
        "tool:search.web\n",
        "tool:search.\u200bweb",
        "tool:search.\uff57eb",
        "tool:search.Web",
        "tool:search..web",
        "tool:search.*",
        "tool:search.web/../admin",
        "tool:search." + "a" * 200,
    ],
)
def test_a_wildcard_never_matches_a_name_that_is_not_canonical(resource: str) -> None:
    """Review R55: ``tool:search.*`` and ``tool:*`` covered a call on a non-canonical name (a
    trailing newline, a zero-width or fullwidth letter, upper case, an empty segment, the pattern
    itself); ``covers`` and ``pattern_matches`` must deny it as the decision does."""
    call = Call(resource, "invoke", {})
    for pattern in ("tool:search.*", "tool:*"):
        assert not pattern_matches(pattern, resource), (pattern, resource)
        assert not covers(Capability.of(pattern), call), (pattern, resource)
    assert covers(Capability.of("tool:search.*"), Call("tool:search.web", "invoke", {}))


def test_the_algebra_is_textual_as_the_policy_reference_says() -> None:
    """Review R55: docs/policy-reference.md (capabilities) says the operators compare text as it
    is: no path resolution, no Unicode normalization, no case folding; argument names are keys."""
    drafts = parse_capability("tool:files.read?path^=reports/drafts/")
    assert covers(drafts, Call.tool("files.read", {"path": "reports/drafts/../../etc/passwd"}))
    cafe = Capability.of("tool:t", None, {"who": {"eq": "caf\u00e9"}})
    assert covers(cafe, Call.tool("t", {"who": "caf\u00e9"}))
    for other in ("cafe\u0301", "CAF\u00c9", "caf\u00e9\u200b", "caf\u00e9\n"):
        assert not covers(cafe, Call.tool("t", {"who": other})), other
    nested = Capability.of("tool:t", None, {"a.b": {"le": 5}})
    assert covers(nested, Call.tool("t", {"a.b": 5, "a": {"b": 10**9}}))
    assert not covers(nested, Call.tool("t", {"a": {"b": 1}}))
    zero = parse_capability("tool:t?n=0")
    assert covers(zero, Call.tool("t", {"n": -0.0})) and covers(zero, Call.tool("t", {"n": 0.0}))
    assert not covers(zero, Call.tool("t", {"n": False}))


def test_attenuates_decides_over_the_reals_and_witness_over_numbers_a_call_can_hold() -> None:
    """Review R55 (attenuates' docstring said it agrees with witness): a child wider only by reals
    no integer or double can be is not attenuated, and has no witness call."""
    for parent, child in (
        ({"eq": 1}, {"gt": 4.999999999999999, "lt": 5}),
        ({"le": 2**60}, {"lt": 2**60 + 1}),
    ):
        p, c = Capability.of("tool:t", None, {"x": parent}), Capability.of("tool:t", None, {"x": child})
        assert not attenuates(p, c) and witness(p, c) is None


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
    st.sampled_from(["EUR", "USD", "", "a", "1", "\u00e9", "a\ud800", "\udfff"]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
)
SMALL = st.one_of(st.integers(-3, 3), st.sampled_from(["EUR", "USD", "a", "\u00e9", "a\ud800"]))
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


@pytest.mark.parametrize(
    "spec",
    [{"prefix": "a\ud800"}, {"eq": "\udfff"}, {"eq": "b", "in": ["a\ud800", "b"]}, {"in": ["\ud800", "b"]}],
)
def test_building_from_canonical_form_refuses_a_lone_surrogate(spec: dict[str, object]) -> None:
    """Review R55: ``capability_from_canonical`` built a capability holding a lone surrogate,
    which ``from_dict`` refuses and whose one-line form raised ``UnicodeEncodeError``; it must
    leave such a value to the reference steps (``None``), which refuse it."""
    data = {"resource": "tool:x", "action": "invoke", "constraints": {"a": spec}}
    assert capability_from_canonical(data) is None
    with pytest.raises(CapabilityError, match="not valid Unicode text"):
        Capability.from_dict(data)


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


def test_a_subclassed_constraint_value_is_held_as_the_plain_value_it_holds() -> None:
    """Constraint values enter the algebra as exact built-in types: a ``str`` or ``int`` subclass
    is the text or integer it holds, a number equals any number of equal value, never a boolean."""
    texts = Constraint.of({"in": [_Str("EUR"), "USD"]})
    assert texts.one_of is not None and [type(v) for v in texts.one_of] == [str, str]
    assert texts.allows("EUR") and texts.allows(_Str("EUR"))
    numbers = Constraint.of({"in": [_Int(1), 2]})
    assert numbers.one_of is not None and type(numbers.one_of[0]) is int and numbers.allows(1)
    assert Constraint.of({"in": ["EUR", 1]}).allows(1.0) and not Constraint.of({"in": ["EUR", 1]}).allows(
        True
    )


class _AlwaysStartsWith(str):
    """Text that says it starts with anything, equals anything, and hashes as ``/tmp/job``."""

    def startswith(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("/tmp/job")


class _LiesInRange:
    """Mixed into a number type: says it equals anything and lies inside every bound."""

    def __eq__(self, other: object) -> bool:
        return True

    def __le__(self, other: object) -> bool:
        return True

    __lt__ = __le__

    def __ge__(self, other: object) -> bool:
        return False

    __gt__ = __ge__


class _AlwaysInRange(_LiesInRange, int):
    """An integer that says it equals anything and lies inside every bound."""

    __hash__ = int.__hash__


class _AlwaysInRangeFloat(_LiesInRange, float):
    """The same, a float."""

    __hash__ = float.__hash__


class _ClaimsToBeText:
    """Not a ``str`` at all, but ``isinstance(x, str)`` is true: its ``__class__`` says so."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return str

    def startswith(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class _ClaimsToBeAnInteger(_ClaimsToBeText):
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return int


_TEXT_SPECS = ['path^="/tmp/"', 'path="/tmp/job"', 'path="/tmp/job"|"/tmp/log"']
_NUMBER_SPECS = ["amount<=500", "amount<500", "amount>=1&amount<=500", "amount=5", "amount=5|6"]


@pytest.mark.parametrize(
    ("spec", "value"),
    [(spec, _AlwaysStartsWith("/etc/passwd")) for spec in _TEXT_SPECS]
    + [(spec, _ClaimsToBeText()) for spec in _TEXT_SPECS]
    + [(spec, _AlwaysInRange(10**6)) for spec in _NUMBER_SPECS]
    + [(spec, _AlwaysInRangeFloat(1e6)) for spec in _NUMBER_SPECS]
    + [(spec, _ClaimsToBeAnInteger()) for spec in _NUMBER_SPECS],
    ids=lambda v: v if isinstance(v, str) and type(v) is str else type(v).__name__,
)
def test_an_argument_is_decided_on_its_plain_value_never_on_methods_its_caller_wrote(
    spec: str, value: object
) -> None:
    """Review R51: ``prefix``, ``eq``, ``in`` and the bounds called the argument's own
    ``startswith``, ``__eq__`` and ``__le__``, so an in-process caller's ``str``/``int``/``float``
    subclass (or an object whose ``__class__`` claims ``str``) passed any constraint:
    ``Call.model("m", {"path": Evil("/etc/passwd")})`` was covered by ``path^=/tmp/``. Now a
    call holds the plain value (a subclass's methods are never called) and a constraint refuses
    what is not a string, number or boolean."""
    cap = parse_capability(f"model:m?{spec}")
    ((name, constraint),) = cap.constraints
    assert not covers(cap, Call.model("m", {name: value}))
    assert not constraint.allows(value)


def test_a_call_holds_exact_builtin_types_and_keeps_what_a_subclass_holds() -> None:
    """``Call`` converts a ``str``/``int``/``float`` subclass argument (a ``str`` enum member) to
    the plain value it holds, by the base type's method; a ``bool`` stays a ``bool``; nested
    values and other types are kept as they are."""
    import enum

    class Currency(enum.StrEnum):
        EUR = "EUR"

    class Size(enum.IntEnum):
        BIG = 7

    nested = [_AlwaysStartsWith("x")]
    call = Call.model(
        "m",
        {
            "cur": Currency.EUR,
            "n": Size.BIG,
            "path": _AlwaysStartsWith("/etc/passwd"),
            "x": _AlwaysInRangeFloat(2.5),
            "flag": True,
            "nested": nested,
        },
    )
    assert call.args == {
        "cur": "EUR",
        "n": 7,
        "path": "/etc/passwd",
        "x": 2.5,
        "flag": True,
        "nested": nested,
    }
    assert [type(v) for v in call.args.values()] == [str, int, str, float, bool, list]
    assert call.args["nested"] is nested
    assert covers(parse_capability("model:m?cur=EUR&n<=7&flag=true"), call)
    assert not covers(parse_capability("model:m?flag=1"), call)  # a boolean is never a number


def test_a_calls_resource_action_and_argument_names_are_exact_strings() -> None:
    """A resource that says it equals, and starts with, every pattern (``Call(Evil("tool:shell"),
    ...)``) matched ``tool:safe`` by its own ``__eq__``; an argument name that hashes and
    compares as another one could stand in for it. ``Call`` holds each as a plain ``str``, and
    refuses two names that are one name as ``str``."""

    class Anything(str):
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return hash("tool:safe")

        def startswith(self, *args: Any, **kwargs: Any) -> bool:
            return True

    call = Call(Anything("tool:shell"), Anything("invoke"), {Anything("amount"): 1})
    assert (type(call.resource), type(call.action)) == (str, str)
    assert [type(k) for k in call.args] == [str]
    assert not covers(parse_capability("tool:safe"), call)
    assert not covers(parse_capability("tool:safe.*"), call)

    class Apart(str):  # a second key beside "amount" in one dict
        __eq__ = object.__eq__
        __hash__ = object.__hash__

    with pytest.raises(CapabilityError, match="'amount' is given twice"):
        Call("tool:x", "invoke", {"amount": 1, Apart("amount"): 10**6})
    cap = Capability(
        Anything("tool:x"), Anything("invoke"), ((Anything("amount"), Constraint.of({"le": 5})),)
    )
    assert (type(cap.resource), type(cap.action), type(cap.constraints[0][0])) == (str, str, str)
    assert not covers(cap, Call("tool:safe", "invoke", {"amount": 1}))
    with pytest.raises(CapabilityError, match="a call's resource and action are strings"):
        Call(_ClaimsToBeText(), "invoke")  # type: ignore[arg-type]


def test_a_call_reads_a_mapping_of_arguments_once() -> None:
    """A ``Mapping`` that answers each read with another value (1 when checked, a million when
    recorded) is read once, into the ``dict`` that is both checked and recorded."""
    from collections.abc import Iterator, Mapping

    class Shifting(Mapping[str, int]):
        reads = 0

        def __getitem__(self, key: str) -> int:
            self.reads += 1
            return 1 if self.reads == 1 else 10**6

        def __iter__(self) -> Iterator[str]:
            return iter(["amount"])

        def __len__(self) -> int:
            return 1

    call = Call("tool:pay", "invoke", Shifting())
    assert type(call.args) is dict
    assert covers(parse_capability("tool:pay?amount<=500"), call) and call.args == {"amount": 1}


# --- the grammar refuses rather than guesses -------------------------------------------------------


def test_an_operator_given_twice_on_one_field_is_refused() -> None:
    """Mutant: the parser drops the "given twice" check, so the later bound silently replaces the
    earlier one (``amount<=500&amount<=900`` would allow 900). Rule: refuse, never guess."""
    for text in ("tool:pay?amount<=500&amount<=900", "tool:pay?cur=EUR&cur=USD", "tool:pay?p^=a&p^=ab"):
        with pytest.raises(CapabilityError, match="given twice"):
            parse_capability(text)


@pytest.mark.parametrize(
    ("cap", "words"),
    [
        ("tool:payments.refund#", "'#' with no action"),
        ("tool:payments.refund?amount<=5&amount<=500", "given twice"),
        ('tool:payments.refund?currency="EUR', "encloses a whole value"),
        ("tool:payments.refund?currency=E%zz", "'%' starts a %XX escape"),
        ("tool:payments.refund?currency^=", "an empty prefix"),
    ],
)
def test_a_capability_outside_the_grammar_is_refused(cap: str, words: str) -> None:
    """Kills: parse_capability's refusals dropped one by one (an empty action read as the
    default, a repeated operator keeping the last (wider) bound, a stray quote or a bad escape
    read literally, an empty prefix matching every string).

    docs/cli.md (CAP): anything outside the grammar is refused rather than guessed."""
    from agentgate.capabilities import parse_capability
    from agentgate.errors import CapabilityError

    with pytest.raises(CapabilityError, match=re.escape(words)):
        parse_capability(cap)


# --- attenuation and coverage, through delegation and decisions -------------------------------------


def test_an_open_bound_is_not_widened_to_a_closed_one() -> None:
    """Kills C2 (``_subset``: ``hi_ok = child.hi <= parent.hi``, openness ignored) and C3 (the same
    for the lower bound): ``amount<=500`` under ``amount<500`` would pass as an attenuation and a
    delegate could then spend exactly 500."""
    for parent_text, child_text, edge in (
        ("tool:payments.refund?amount<500", "tool:payments.refund?amount<=500", 500),
        ("tool:payments.refund?amount>0", "tool:payments.refund?amount>=0", 0),
    ):
        parent, child = Capability.parse(parent_text), Capability.parse(child_text)
        assert not attenuates(parent, child)
        found = witness(parent, child)
        assert found is not None and found.args["amount"] == edge
        chain = issue(ROOT_KEY, ALICE_KEY.did, [parent_text], ttl=3600, now=NOW)
        with pytest.raises(ScopeCreep):
            delegate(chain, ALICE_KEY, BOB_KEY.did, [child_text], ttl=60, now=NOW)


def test_a_prefix_constraint_only_narrows_to_a_longer_prefix() -> None:
    """Kills C4 (``_subset`` for prefixes reversed: ``parent.prefix.startswith(child.prefix)``): a
    child ``path^=t`` would pass under ``path^=tmp_`` and reach every path starting with ``t``."""
    parent = Capability.parse("tool:files.read?path^=tmp_")
    wider = Capability.parse("tool:files.read?path^=t")
    narrower = Capability.parse("tool:files.read?path^=tmp_cache_")
    assert not attenuates(parent, wider)
    assert attenuates(parent, narrower)
    chain = issue(ROOT_KEY, ALICE_KEY.did, ["tool:files.read?path^=tmp_"], ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep):
        delegate(chain, ALICE_KEY, BOB_KEY.did, ["tool:files.read?path^=t"], ttl=60, now=NOW)


def test_a_dotted_wildcard_stops_at_the_dot(repo: GrantRepository) -> None:  # noqa: F811 (the imported fixture)
    """Kills C5 (``pattern_matches``: ``tool:payments.*`` tested with ``startswith("tool:payments")``,
    no dot boundary): a grant for ``tool:payments.*`` would cover ``tool:payments_admin.wipe``."""
    assert pattern_matches("tool:payments.*", "tool:payments.refund")
    assert not pattern_matches("tool:payments.*", "tool:payments_admin.wipe")
    assert not covers(Capability.parse("tool:payments.*"), Call.tool("payments_admin.wipe"))
    chain = issue(ROOT_KEY, ALICE_KEY.did, ["tool:payments.*"], ttl=3600, now=NOW)
    assert _decide(repo, ALICE_KEY, chain, Call.tool("payments.refund"))[0] is Outcome.ALLOW
    assert _decide(repo, ALICE_KEY, chain, Call.tool("payments_admin.wipe")) == (
        Outcome.DENY,
        "call_not_covered",
    )


def test_a_wildcard_child_must_extend_the_parent_stem_at_a_dot(repo: GrantRepository) -> None:  # noqa: F811 (the imported fixture)
    """Kills C6 (``pattern_within``: ``child[:-2].startswith(parent[:-2])``, no dot boundary): a
    holder of ``tool:payments.*`` could delegate ``tool:payments_admin.*``, which it never held."""
    assert not pattern_within("tool:payments_admin.*", "tool:payments.*")
    assert pattern_within("tool:payments.admin.*", "tool:payments.*")
    assert not attenuates(Capability.parse("tool:payments.*"), Capability.parse("tool:payments_admin.*"))
    chain = issue(ROOT_KEY, ALICE_KEY.did, ["tool:payments.*"], ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep):
        delegate(chain, ALICE_KEY, BOB_KEY.did, ["tool:payments_admin.*"], ttl=60, now=NOW)


def test_eq_and_in_on_one_field_are_a_conjunction(repo: GrantRepository) -> None:  # noqa: F811 (the imported fixture)
    """Kills C12 (``Constraint._normalize``: the ``in`` set no longer intersected with ``eq``):
    ``currency=EUR&currency=EUR|USD`` would allow USD."""
    both = Constraint.of({"eq": "EUR", "in": ["EUR", "USD"]})
    assert both.allows("EUR") and not both.allows("USD")
    chain = issue(
        ROOT_KEY, ALICE_KEY.did, ["tool:payments.refund?currency=EUR&currency=EUR|USD"], ttl=3600, now=NOW
    )
    assert (
        _decide(repo, ALICE_KEY, chain, Call.tool("payments.refund", {"currency": "EUR"}))[0] is Outcome.ALLOW
    )
    assert _decide(repo, ALICE_KEY, chain, Call.tool("payments.refund", {"currency": "USD"})) == (
        Outcome.DENY,
        "call_not_covered",
    )


# --- the constraint algebra, checked against delegation and hand-signed links -----------------------


@pytest.mark.parametrize(
    ("text", "bound"),
    [
        ("amount>5&amount>=5", 5),
        ("amount>=5&amount>5", 5),
        ("amount<5&amount<=5", 5),
        ("amount<=5&amount<5", 5),
    ],
)
def test_an_open_and_a_closed_bound_at_one_value_leave_the_value_out(text: str, bound: int) -> None:
    """Mutants: ``Constraint._bounds`` lets a closed bound replace an open one at the same value
    (``b >= lo`` for ``b > lo or (b == lo and is_open)``; likewise for the upper bound). Rule:
    a conjunction is the tightest of its bounds: ``amount>5&amount>=5`` refuses 5, whichever
    clause comes first."""
    cap = parse_capability("tool:pay?" + text)
    assert not covers(cap, Call.tool("pay", {"amount": bound}))
    assert not cap.constraint_map["amount"].allows(bound)
    inside = bound + 1 if ">" in text else bound - 1
    assert covers(cap, Call.tool("pay", {"amount": inside}))


def test_an_equality_beside_an_integer_upper_bound_still_binds() -> None:
    """Mutant: the shortcut in ``Constraint._normalize`` for one integer ``le`` no longer requires
    that no ``eq`` is given, so ``amount=3&amount<=10`` became ``amount<=10``. Rule: clauses on
    one field are a conjunction: only 3 passes; and ``amount=30&amount<=10`` passes nothing."""
    cap = parse_capability("tool:pay?amount=3&amount<=10")
    assert covers(cap, Call.tool("pay", {"amount": 3}))
    assert not covers(cap, Call.tool("pay", {"amount": 5}))
    assert parse_capability("tool:pay?amount=30&amount<=10").constraint_map["amount"].is_empty


def test_an_equality_beside_a_set_keeps_only_the_equal_value() -> None:
    """Mutant: ``Constraint._normalize`` takes the whole ``in`` set when an ``eq`` is also given
    (``cur=EUR&cur=EUR|USD`` became ``cur=EUR|USD``). Rule: a conjunction: only EUR passes."""
    cap = parse_capability("tool:pay?cur=EUR&cur=EUR|USD")
    assert covers(cap, Call.tool("pay", {"cur": "EUR"}))
    assert not covers(cap, Call.tool("pay", {"cur": "USD"}))


def _widening_refused(parent: str, child: str) -> None:
    p, c = parse_capability(parent), parse_capability(child)
    assert not attenuates(p, c)
    root = issue(ROOT_KEY, ALICE_KEY.did, [parent], ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep):
        delegate(root, ALICE_KEY, BOB_KEY.did, [child], ttl=60, now=NOW)
    hand_built = _linked_token(
        (ROOT_KEY, _body(caps=[p.to_dict()])),
        (ALICE_KEY, _body(iss=ALICE_KEY.did, aud=BOB_KEY.did, depth=0, caps=[c.to_dict()])),
    )
    assert _refusal(hand_built) in ("constraint_widened", "capability_widened")


def test_a_child_set_with_one_value_outside_the_parents_is_wider() -> None:
    """Mutant: ``_subset`` of a finite child asks that ``any`` value lie in the parent (for
    ``all``). Rule: ``cur=EUR|USD`` does not attenuate ``cur=EUR``: delegating it is refused."""
    _widening_refused("tool:pay?cur=EUR", "tool:pay?cur=EUR|USD")
    assert attenuates(parse_capability("tool:pay?cur=EUR|USD"), parse_capability("tool:pay?cur=EUR"))


@pytest.mark.parametrize(
    ("parent", "child"),
    [
        ("tool:pay?amount>5&amount<=10", "tool:pay?amount>=5&amount<=10"),
        ("tool:pay?amount>=0&amount<10", "tool:pay?amount>=0&amount<=10"),
        ("tool:pay?amount>5", "tool:pay?amount>=5"),
        ("tool:pay?amount<10", "tool:pay?amount<=10"),
    ],
)
def test_a_closed_bound_is_wider_than_an_open_one_at_the_same_value(parent: str, child: str) -> None:
    """Mutants: ``_subset`` of two intervals takes an equal lower (or upper) bound as inside
    whatever its openness. Rule: ``amount>=5`` holds 5, which ``amount>5`` does not: wider."""
    _widening_refused(parent, child)
    assert attenuates(parse_capability(child), parse_capability(parent))


def test_a_shorter_prefix_is_wider_than_a_longer_one() -> None:
    """Mutant: ``_subset`` of two prefixes asks whether the parent's extends the child's (swapped).
    Rule: ``path^=/tmp/`` does not attenuate ``path^=/tmp/job/``; the reverse does."""
    _widening_refused('tool:pay?path^="/tmp/job/"', 'tool:pay?path^="/tmp/"')
    assert attenuates(
        parse_capability('tool:pay?path^="/tmp/"'), parse_capability('tool:pay?path^="/tmp/job/"')
    )


def test_a_wildcard_is_never_within_an_exact_resource() -> None:
    """Mutant: ``pattern_within`` no longer refuses a wildcard child under an exact parent, and
    compares stems (``tool:pay.*`` minus one character extends ``tool:pay`` minus one). Rule: a
    wildcard names resources an exact name does not (``tool:pay.refund``): wider."""
    _widening_refused("tool:pay", "tool:pay.*")
    assert not attenuates(parse_capability("tool:pa"), parse_capability("tool:pay.*"))


@pytest.mark.parametrize(
    "spec",
    [{"eq": math.inf}, {"eq": -math.inf}, {"eq": math.nan}, {"in": [1, math.nan]}, {"in": [math.inf, 2]}],
    ids=["eq-inf", "eq-minus-inf", "eq-nan", "in-nan", "in-inf"],
)
def test_a_non_finite_value_is_refused_in_an_equality_or_a_set(spec: dict[str, Any]) -> None:
    """Mutant: ``_check_value`` drops its finiteness check for floats (the bounds stay refused by
    ``_is_number``, which the suite tested). Rule: a constraint value is a finite number, a
    string or a boolean: ``eq: inf`` or ``in: [nan]`` is refused with ``CapabilityError`` (it
    has no canonical JSON and no value equals NaN), never kept in a capability."""
    with pytest.raises(CapabilityError, match="finite"):
        Constraint.of(spec)
    with pytest.raises(CapabilityError):
        Capability.of("tool:pay", constraints={"amount": spec})


class _SaysItIsAbove(_LiesInRange, int):
    """A bound that, compared with any value, says the value is within it (Python asks the
    right operand's reflected method first when its type subclasses the left's)."""

    __hash__ = int.__hash__

    def __ge__(self, other: object) -> bool:
        return True

    __gt__ = __ge__


@pytest.mark.parametrize(
    "fields",
    [
        {"le": _SaysItIsAbove(100)},
        {"lt": _SaysItIsAbove(100)},
        {"eq": _AlwaysStartsWith("/tmp/job")},
        {"prefix": _AlwaysStartsWith("/tmp/")},
        {"one_of": (_AlwaysStartsWith("/tmp/job"), "x")},
    ],
    ids=lambda fields: next(iter(fields)),
)
def test_a_constraint_built_directly_holds_its_values_as_plain_built_in_types(fields: dict[str, Any]) -> None:
    # R53: Call and Constraint.of hold exact built-in types; Constraint(...) built directly kept
    # a subclass, whose own comparison then decided: Constraint(le=...) allowed 10**6.
    constraint = Constraint(**fields)
    held = [v for v in (*constraint.to_dict().values(),) for v in (v if isinstance(v, list) else [v])]
    assert all(type(v) in (str, int, float, bool) for v in held), held
    assert not constraint.allows(10**6) and not constraint.allows("/etc/passwd")


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"le": "100"},
        {"le": True},
        {"le": math.nan},
        {"ge": math.inf},
        {"eq": [1]},
        {"eq": None, "one_of": ()},
        {"one_of": ["EUR"]},
        {"one_of": ("EUR", None)},
        {"prefix": 5},
        {"prefix": "\ud800"},
        {"eq": _ClaimsToBeText()},
    ],
    ids=lambda fields: ",".join(f"{k}={type(v).__name__}" for k, v in fields.items()) or "none",
)
def test_a_constraint_built_directly_refuses_what_constraint_of_refuses(fields: dict[str, Any]) -> None:
    with pytest.raises(CapabilityError):
        Constraint(**fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"le": 10**5000},
        {"ge": -(2**63)},
        {"lt": 2**63},
        {"eq": 2**63},
        {"one_of": (1, -(10**5000))},
    ],
    ids=["le=10**5000", "ge=-2**63", "lt=2**63", "eq=2**63", "one_of"],
)
def test_a_constraint_built_directly_refuses_the_integers_of_refuses(fields: dict[str, Any]) -> None:
    """Review R55: Constraint(le=10**5000) was held, and str() of it a bare ValueError (digits)."""
    spec = {"in" if op == "one_of" else op: list(v) if op == "one_of" else v for op, v in fields.items()}
    with pytest.raises(CapabilityError, match=r"out of range \(\|v\| < 2\*\*63\)") as refused_by_of:
        Constraint.of(spec)
    with pytest.raises(CapabilityError, match=r"out of range \(\|v\| < 2\*\*63\)") as refused:
        Constraint(**fields)
    assert str(refused.value).removeprefix("Constraint") == str(refused_by_of.value).removeprefix(
        "constraint"
    )
    held = Constraint(le=2**63 - 1, ge=-(2**63 - 1))
    assert format_capability(Capability("tool:x", "invoke", (("v", held),))) == (
        "tool:x?v<=9223372036854775807&v>=-9223372036854775807"
    )
