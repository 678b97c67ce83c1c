"""Review R83 of the capability algebra: defects found, each failing before its fix.

A role's rule holding a number no grant token carries linted clean, and ``issue`` named a whole
float out of range as an integer never written (``role_grant_not_issuable``). A huge integer
given as an argument name or an operator was a bare ``ValueError``, and a rejected value was
quoted whole. ``parse_capability`` refused the one-line form ``format_capability`` wrote of a
capability a token carries, past 4,096 characters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import issue
from agentgate.authority._grant import MAX_PAYLOAD_BYTES
from agentgate.capabilities import Capability, Constraint, format_capability, parse_capability
from agentgate.capabilities._capability import MAX_CAPABILITY_TEXT
from agentgate.cli.main import main
from agentgate.errors import CapabilityError, TokenFormatError
from agentgate.gate import Gate
from agentgate.keys import SigningKey, save_key
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
    # Said with the role, and where to look (the second reading of R83).
    assert str(refused.value).startswith("no grant for role worker can be issued to bot: ")
    assert "role_grant_not_issuable" in str(refused.value)


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


# --- the one-line form of every capability a token carries parses back -------------------------------


def _largest_carried(build: Callable[[int], Capability]) -> Capability:
    """``build(k)`` for the largest ``k`` whose capability a grant token still carries."""
    carried = None
    for k in range(1, 10_000):
        try:
            carried = issue(ROOT, BOT.public, [build(k)], ttl=60).tip.capabilities[0]
        except TokenFormatError:  # the payload is over MAX_PAYLOAD_BYTES
            assert carried is not None
            return carried
    raise AssertionError("no payload limit reached")


def _long_names(k: int) -> Capability:
    # Each 200-character name once in the JSON, once per operator (seven) on the line.
    operators = {"eq": 0, "in": [0, 1], "lt": 0, "le": 0, "gt": 0, "ge": 0, "prefix": ""}
    return Capability.of("tool:x", constraints={f"a{i:03}" + "b" * 196: operators for i in range(k)})


def _escaped_text(k: int) -> Capability:
    # Each byte of text as three characters, and a one-value set written twice (a=x&a=x|x).
    text = "€" * (40 * k)
    return Capability.of("tool:x", constraints={"a": {"eq": text, "in": [text]}})


def test_the_line_limit_is_seven_grant_payloads() -> None:
    """The figure docs/cli.md states, from the token's limit (the argument is in its docstring)."""
    assert MAX_CAPABILITY_TEXT == 7 * MAX_PAYLOAD_BYTES == 57_344


@pytest.mark.parametrize("build", [_long_names, _escaped_text])
def test_the_one_line_form_of_a_capability_a_token_carries_parses_back(
    build: Callable[[int], Capability],
) -> None:
    """Review R83: ``format_capability`` promises ``parse_capability(format_capability(c)) == c``,
    and ``parse_capability`` refused a line over 4,096 characters: an ``in`` of 1,000 short values,
    which a token carries, was written in 5,916 characters, so a capability copied from ``grant
    inspect`` or a refusal into ``--allow`` was refused. Rule: the largest capabilities of each
    shape that a token carries (lines of 34,579 and 41,389 characters) round-trip."""
    carried = _largest_carried(build)
    line = format_capability(carried)
    assert len(line) > 4096
    assert parse_capability(line) == carried


def test_a_capability_a_token_carries_copied_into_allow_is_issued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 order numbers (the most an ``in`` holds), as ``grant inspect`` writes them: a line of
    4,916 characters, refused as ``--allow`` until review R83."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    issuer, _ = save_key(ROOT, tmp_path / "k", "root")
    _, holder = save_key(BOT, tmp_path / "k", "agent")
    line = format_capability(
        Capability.of("tool:payments.refund", constraints={"order": {"in": [f"O{i}" for i in range(1000)]}})
    )
    assert len(line) == 4916
    assert main(["store", "init"]) == 0
    argv = ["grant", "issue", "--issuer", str(issuer), "--to", str(holder), "--allow", line, "--ttl", "30m"]
    assert main([*argv, "--out", str(tmp_path / "t.tok")]) == 0
