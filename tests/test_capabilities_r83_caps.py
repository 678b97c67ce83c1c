"""Review R83 of the capability algebra: defects found, each failing before its fix.

A role's rule holding a number no grant token carries linted clean, and ``issue`` named a whole
float out of range as an integer never written (``role_grant_not_issuable``). A huge integer
given as an argument name or an operator was a bare ``ValueError``, and a rejected value was
quoted whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import issue
from agentgate.capabilities import Capability, Constraint
from agentgate.errors import CapabilityError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import lint, parse_policy

ROOT, BOT = SigningKey.generate(), SigningKey.generate()

_POLICY = f"""version: 1
trust_anchors:
  root: {{did: {ROOT.did}}}
principals:
  bot: {{kind: agent, did: {BOT.did}, roles: [worker]}}
tools:
  payments.refund:
    args:
      amount: {{type: number, required: true}}
roles:
  worker:
    capabilities:
      - resource: tool:payments.refund
        constraints: {{amount: {{BOUND}}}}
    ttl_s: 600
"""
_RULE_LINE = 13


# --- a role's rule holding a number no token carries ---------------------------------------------


@pytest.mark.parametrize(
    ("bound", "written", "why"),
    [
        ("le: 500.5", "500.5", "is not an integer; tokens carry integers only"),
        ("in: [100, 250.25]", "250.25", "is not an integer; tokens carry integers only"),
        ("le: 1.0e+19", "1e+19", "is out of range for a token (|v| < 2**63)"),
        ("ge: -9.3e18", "-9.3e+18", "is out of range for a token (|v| < 2**63)"),
    ],
)
def test_a_role_rule_no_token_carries_is_a_lint_error_and_issue_names_the_value_as_written(
    tmp_path: Path, bound: str, written: str, why: str
) -> None:
    """Review R83: ``amount: {le: 500.5}`` (or ``le: 1.0e+19``) in a role's rule loaded with no
    lint finding, and ``Gate.issue`` for the role always failed, for ``1.0e+19`` as ``integer
    10000000000000000000 is out of range``, a number the author never wrote.

    Rule: lint reports the rule, at its line, naming the value as written; ``Gate.issue`` refuses
    the grant naming the value as written too, as ``--allow`` does."""
    text = _POLICY.replace("BOUND", bound)
    findings = lint(parse_policy(text, source="p.yaml"))
    assert [(f.code, f.severity.value, f.line) for f in findings] == [
        ("role_grant_not_issuable", "error", _RULE_LINE)
    ]
    assert f"argument amount: {written} {why}" in findings[0].message
    assert "role worker" in findings[0].message
    path = tmp_path / "p.yaml"
    path.write_text(text)
    gate = Gate.open(path, tmp_path / "s.db")
    try:
        with pytest.raises(CapabilityError) as refused:
            gate.issue(ROOT, name="bot", key=BOT, role="worker")
    finally:
        gate.close()
    assert f"tool:payments.refund amount: {written} {why}" in str(refused.value)
    assert "integer 1" not in str(refused.value)


def test_issue_refuses_a_whole_float_out_of_range_as_written() -> None:
    """Review R83: ``issue`` turned ``le: 1e19`` into the integer 10000000000000000000 and refused
    that, as a ``TokenFormatError``; a whole float within range still goes in as its integer."""
    huge = Capability.of("tool:x", constraints={"n": {"le": 1e19}})
    with pytest.raises(CapabilityError, match=r"tool:x n: 1e\+19 is out of range for a token"):
        issue(ROOT, BOT.public, [huge], ttl=60)
    whole = Capability.of("tool:x", constraints={"n": {"le": 500.0}})
    granted = issue(ROOT, BOT.public, [whole], ttl=60).tip.capabilities[0]
    assert type(granted.constraint_map["n"].le) is int and granted.constraint_map["n"].le == 500


@pytest.mark.parametrize("bound", ["le: 500", "le: 500.0", "le: 9.2e18", "in: [1, 2.0]"])
def test_a_role_rule_a_token_carries_is_not_reported(tmp_path: Path, bound: str) -> None:
    """An integer, or a whole float within range, goes into a token: no finding, and the grant is
    issued."""
    text = _POLICY.replace("BOUND", bound)
    assert lint(parse_policy(text, source="p.yaml")) == ()
    path = tmp_path / "p.yaml"
    path.write_text(text)
    gate = Gate.open(path, tmp_path / "s.db")
    try:
        assert gate.issue(ROOT, name="bot", key=BOT, role="worker").chain.tip.capabilities
    finally:
        gate.close()


def test_a_fraction_in_a_delegation_rule_or_a_gate_condition_is_not_reported() -> None:
    """A delegation rule bounds grants made with their own numbers (``le: 100`` lies within ``le:
    100.5``), and a gate's ``when`` is compared with a call's arguments: neither goes into a token."""
    text = _POLICY.replace("BOUND", "le: 500") + (
        "    delegation:\n      max_ttl_s: 600\n      capabilities:\n"
        "        - resource: tool:payments.refund\n          constraints: {amount: {le: 100.5}}\n"
        "approvals:\n  large:\n    resource: tool:payments.refund\n"
        "    when: {amount: {gt: 250.5}}\n    approvers: [bot]\n"
    )
    codes = [f.code for f in lint(parse_policy(text, source="p.yaml"))]
    assert "role_grant_not_issuable" not in codes, codes


def test_an_inherited_rule_no_token_carries_is_reported_once_at_its_own_line() -> None:
    """The rule is reported where it is written, once, though each role inheriting it cannot be
    issued either."""
    text = _POLICY.replace("BOUND", "le: 500.5") + ("  lead:\n    inherits: [worker]\n    ttl_s: 600\n")
    found = [f for f in lint(parse_policy(text, source="p.yaml")) if f.code == "role_grant_not_issuable"]
    assert [f.line for f in found] == [_RULE_LINE]


# --- a huge integer where a name or an operator goes, and a rejected value of megabytes ------------

_UNWRITABLE = 10**5000  # past Python's 4,300 digits: repr() and str() raise ValueError


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (
            lambda: Capability.of("tool:x", constraints={_UNWRITABLE: {"le": 5}}),
            "tool:x: argument name an integer of 16610 bits is not an identifier",
        ),
        (
            lambda: Capability("tool:x", "invoke", ((_UNWRITABLE, Constraint(eq=1)),)),
            "tool:x: argument name an integer of 16610 bits is not an identifier",
        ),
        (
            lambda: Capability("tool:x", "invoke", ((_UNWRITABLE, 1),)),
            "tool:x: constraints are (name, Constraint) pairs, got a tuple holding an integer too long",
        ),
        (
            lambda: Constraint.of({_UNWRITABLE: 1}),
            "constraint: unknown operator an integer of 16610 bits; use one of eq,",
        ),
    ],
)
def test_a_huge_integer_as_a_name_or_an_operator_is_a_capability_error(build: Any, said: str) -> None:
    """Review R83: the refusal quoted the integer with ``repr`` (or an f-string), which raises a
    bare ``ValueError`` for one of more than 4,300 digits: the caller's ``except CapabilityError``
    missed it. Rule: it is a ``CapabilityError`` naming the integer by its size."""
    with pytest.raises(CapabilityError) as refused:
        build()
    assert said in str(refused.value)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Constraint.of({"lt": "x" * 10_000_000}),
        lambda: Constraint.of({"x" * 10_000_000: 1}),
        lambda: Constraint.of({"prefix": "\ud800" * 1_000_000}),
    ],
)
def test_a_rejected_value_of_megabytes_is_quoted_cut(build: Any) -> None:
    """Review R83: ``Constraint.of`` put the whole rejected value in its message (``'lt' takes a
    number, got 'xxx...'``, 10 MB); an unknown operator and a string that is not Unicode text the
    same. Rule: the refusal quotes its first 60 characters, then ``...``, as ``Constraint(lt=...)``
    does."""
    with pytest.raises(CapabilityError) as refused:
        build()
    assert len(str(refused.value)) < 300
    assert "..." in str(refused.value)
