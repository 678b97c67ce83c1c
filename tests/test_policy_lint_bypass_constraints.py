"""``approval_gate_bypass`` reads the rule's own constraints.

A wildcard rule reaches a sibling of a gated tool; it is a path around the gate only for the
calls it admits that the gate would stop there. ``amount <= 500`` on the sibling gets around no
gate on ``amount > 500``. The test is exact: ``intersects`` over the constraint algebra, the
declared argument types (a whole number for an integer), and the gate's fail-closed reading of a
value its condition cannot compare.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import Call, Constraint, intersects
from agentgate.findings import Finding, Outcome
from agentgate.policy import PolicyIndex, lint, parse_policy

HEAD = """version: 1
trust_anchors:
  root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}
principals:
  svc: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [r]}
  alice: {kind: human, did: did:key:z6MkkNV2MQswkwEnXrUkeM7T8qYE3qWB163VBePnsLBSTAru}
"""


def _policy(rule: dict[str, Any], when: dict[str, Any] | None, amount: str = "number") -> str:
    args = (
        f"{{order_id: {{type: string, required: true}}, amount: {{type: {amount}, required: true}}, "
        "currency: {type: string}}"
    )
    gate = f"\n    when: {json.dumps(when)}" if when is not None else ""
    return (
        HEAD
        + f"""tools:
  payments.refund: {{args: {args}}}
  payments.refund_partial: {{args: {args}}}
roles:
  r:
    capabilities: [{{resource: "tool:payments.*", constraints: {json.dumps(rule)}}}]
    ttl_s: 600
approvals:
  large-refund:
    resource: tool:payments.refund{gate}
    approvers: [alice]
"""
    )


def _bypasses(text: str) -> list[Finding]:
    return [f for f in lint(parse_policy(text, source="p.yaml")) if f.code == "approval_gate_bypass"]


# --- the defect: a rule that admits only calls the gate would not stop --------------------------


def test_a_rule_held_below_the_gate_threshold_is_no_bypass() -> None:
    text = _policy({"amount": {"le": 500}}, {"amount": {"gt": 500}})
    assert _bypasses(text) == []
    index = PolicyIndex(parse_policy(text))
    # Every call the rule admits is one the gate lets through on the gated tool too.
    at_most = Call.tool("payments.refund", {"order_id": "o", "amount": 500})
    assert index.evaluate("svc", at_most).outcome is Outcome.ALLOW


def test_a_rule_reaching_above_the_threshold_is_still_a_bypass() -> None:
    text = _policy({"amount": {"le": 900}}, {"amount": {"gt": 500}})
    found = _bypasses(text)
    assert len(found) == 1 and "tool:payments.refund_partial" in found[0].message
    index = PolicyIndex(parse_policy(text))
    gated = Call.tool("payments.refund", {"order_id": "o", "amount": 900})
    around = Call.tool("payments.refund_partial", {"order_id": "o", "amount": 900})
    assert index.evaluate("svc", gated).outcome is Outcome.APPROVAL_REQUIRED
    assert index.evaluate("svc", around).outcome is Outcome.ALLOW  # the path the finding names


@pytest.mark.parametrize(
    ("rule", "when", "amount", "bypass"),
    [
        # numeric ranges: open and closed bounds meet only at a value both admit
        ({"amount": {"lt": 500}}, {"amount": {"ge": 500}}, "number", False),
        ({"amount": {"le": 500}}, {"amount": {"ge": 500}}, "number", True),
        ({"amount": {"le": 500.5}}, {"amount": {"gt": 500}}, "number", True),
        ({"amount": {"gt": 0, "le": 500}}, {"amount": {"gt": 500, "le": 1000}}, "number", False),
        # an integer argument: only whole numbers count
        ({"amount": {"lt": 501}}, {"amount": {"gt": 500}}, "integer", False),
        ({"amount": {"le": 501}}, {"amount": {"gt": 500}}, "integer", True),
        ({"amount": {"eq": 500.5}}, {"amount": {"gt": 500}}, "integer", False),
        # equals and one-of against a range
        ({"amount": {"eq": 500}}, {"amount": {"gt": 500}}, "number", False),
        ({"amount": {"in": [100, 200]}}, {"amount": {"gt": 500}}, "number", False),
        ({"amount": {"in": [100, 900]}}, {"amount": {"gt": 500}}, "number", True),
        # strings: equals, one-of, prefix
        ({"currency": {"eq": "EUR"}}, {"currency": {"in": ["USD", "GBP"]}}, "number", False),
        ({"currency": {"prefix": "U"}}, {"currency": {"in": ["USD", "GBP"]}}, "number", True),
        ({"currency": {"prefix": "EU"}}, {"currency": {"prefix": "US"}}, "number", False),
        ({"currency": {"prefix": "U"}}, {"currency": {"prefix": "US"}}, "number", True),
        ({"currency": {"prefix": "USD-"}}, {"currency": {"prefix": "US"}}, "number", True),
        # the gate's conditions are a conjunction: one the rule avoids is enough
        (
            {"amount": {"le": 1000}, "currency": {"eq": "EUR"}},
            {"amount": {"gt": 500}, "currency": {"eq": "USD"}},
            "number",
            False,
        ),
        (
            {"amount": {"le": 1000}, "currency": {"eq": "USD"}},
            {"amount": {"gt": 500}, "currency": {"eq": "USD"}},
            "number",
            True,
        ),
        # an argument the gate looks at and the rule leaves open takes any value
        ({"order_id": {"prefix": "o-"}}, {"amount": {"gt": 500}}, "number", True),
        ({"currency": {"eq": "EUR"}}, {"amount": {"gt": 500}}, "number", True),
        # a gate on every call stops whatever the rule admits
        ({"amount": {"le": 500}}, None, "number", True),
        # a condition that cannot compare the declared type applies to every call (fail closed)
        ({"amount": {"le": 500}}, {"amount": {"eq": "big"}}, "number", True),
        ({"currency": {"eq": "EUR"}}, {"currency": {"gt": 5}}, "number", True),
        # a rule whose constraint no value of the declared type meets admits no call at all
        ({"amount": {"eq": "900"}}, {"amount": {"gt": 500}}, "number", False),
        ({"amount": {"eq": "900"}}, None, "number", False),
    ],
)
def test_a_bypass_needs_a_call_the_rule_admits_and_the_gate_stops(
    rule: dict[str, Any], when: dict[str, Any] | None, amount: str, bypass: bool
) -> None:
    assert bool(_bypasses(_policy(rule, when, amount))) is bypass


# --- the lint agrees with the runtime, by brute force over a complete sample --------------------

# Bounds are halves in [-2, 2] and prefixes at most two letters of "ab": every non-empty
# intersection of such constraints holds one of these values.
BOUNDS = st.sampled_from([k / 2 if k % 2 else k // 2 for k in range(-4, 5)])
WORDS = ["", "a", "b", "aa", "ab", "ba", "bb"]
POOL: list[Any] = (
    [k // 4 if k % 4 == 0 else k / 4 for k in range(-12, 13)]
    + WORDS
    + [w + c for w in WORDS if len(w) == 2 for c in "ab"]
    + [True, False]
)
SCALARS = st.sampled_from(POOL)


@st.composite
def constraint_specs(draw: st.DrawFn) -> dict[str, Any]:
    ops = draw(
        st.sets(st.sampled_from(["eq", "in", "lt", "le", "gt", "ge", "prefix"]), min_size=1, max_size=3)
    )
    spec: dict[str, Any] = {}
    for op in ops:
        if op == "eq":
            spec[op] = draw(SCALARS)
        elif op == "in":
            spec[op] = draw(st.lists(SCALARS, min_size=1, max_size=4))
        elif op == "prefix":
            spec[op] = draw(st.sampled_from(WORDS[:5]))
        else:
            spec[op] = draw(BOUNDS)
    return spec


@settings(max_examples=500, deadline=None)
@given(constraint_specs(), constraint_specs())
def test_intersects_agrees_with_brute_force(a: dict[str, Any], b: dict[str, Any]) -> None:
    x, y = Constraint.of(a), Constraint.of(b)
    assert intersects(x, y) == any(x.allows(v) and y.allows(v) for v in POOL)
    assert intersects(x, y) == intersects(y, x)


_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float)}


@settings(max_examples=150, deadline=None)
@given(constraint_specs(), st.one_of(st.none(), constraint_specs()), st.sampled_from(sorted(_TYPES)))
def test_a_bypass_is_reported_exactly_when_the_runtime_has_one(
    rule: dict[str, Any], when: dict[str, Any] | None, kind: str
) -> None:
    """Reported iff some value lets the rule allow a sibling call that needs approval on the gated tool."""
    text = _policy({"amount": rule}, None if when is None else {"amount": when}, kind)
    index = PolicyIndex(parse_policy(text))

    def outcome(tool: str, value: Any) -> Outcome:
        return index.evaluate("svc", Call.tool(tool, {"order_id": "o", "amount": value})).outcome

    around = any(
        outcome("payments.refund_partial", v) is Outcome.ALLOW
        and outcome("payments.refund", v) is Outcome.APPROVAL_REQUIRED
        for v in POOL
        if type(v) in _TYPES[kind]
    )
    assert bool(_bypasses(text)) is around
