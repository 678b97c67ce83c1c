"""Review R83: ``constraint_type_mismatch`` (agentgate/policy/_lint/_constraints.py) counts the
integers a call may give, as the run time does (``-2**63 < v < 2**63``, ``_check_arguments``),
for a rule's constraint and for an approval gate's condition."""

from __future__ import annotations

import pytest

from agentgate.capabilities import Call
from agentgate.policy import PolicyIndex, lint, parse_policy

POLICY = """\
version: 1
principals:
  alice: {kind: human, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj}
  bot: {kind: agent, did: did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK, roles: [worker]}
tools:
  payments.refund: {args: {amount: {type: TYPE}}}
roles:
  worker:
    ttl_s: 600
    capabilities:
      - {resource: "tool:payments.refund", constraints: {amount: RULE}}
approvals:
  big:
    resource: tool:payments.refund
    when: {amount: WHEN}
    approvers: [alice]
"""


def _policy(kind: str, rule: str, when: str = "{gt: 0}") -> str:
    return POLICY.replace("TYPE", kind).replace("RULE", rule).replace("WHEN", when)


def _mismatches(text: str) -> list[str]:
    return [
        f.message for f in lint(parse_policy(text, source="p.yaml")) if f.code == "constraint_type_mismatch"
    ]


def _outcome(text: str, amount: float) -> str:
    index = PolicyIndex(parse_policy(text, source="p.yaml"))
    return index.evaluate("bot", Call.tool("payments.refund", {"amount": amount})).outcome.value


@pytest.mark.parametrize(
    "rule",
    [
        "{gt: 9223372036854775807}",
        "{ge: 1.0e19}",
        "{le: -1.0e19}",
        "{eq: 1.0e19}",
        "{in: [1.0e19, -1.0e19]}",
    ],
)
def test_a_rule_no_integer_a_call_may_give_meets_is_a_type_mismatch(rule: str) -> None:
    """Review R83: ``amount: {gt: 9223372036854775807}`` on an integer argument loaded and linted
    clean, yet the run time refuses every integer it admits (2**63 and beyond) and so denies
    every call. docs/lint.md: a constraint that admits no value of the argument's declared type
    is ``constraint_type_mismatch``; for an integer, a value a call may give."""
    text = _policy("integer", rule)
    (message,) = _mismatches(text)
    assert ": amount is an integer but the constraint " in message
    assert message.endswith(" admits no integer a call may give (-2**63 < v < 2**63)")
    assert _outcome(text, 2**63 - 1) == _outcome(text, 2**63) == _outcome(text, -(2**63) + 1) == "deny"


def test_the_message_shows_the_bound() -> None:
    (message,) = _mismatches(_policy("integer", "{gt: 9223372036854775807}"))
    assert message == (
        "role worker rule 1: tool:payments.refund where amount > 9223372036854775807 (line 11): amount "
        'is an integer but the constraint {"gt": 9223372036854775807} admits no integer a call may '
        "give (-2**63 < v < 2**63)"
    )


@pytest.mark.parametrize(
    ("kind", "rule", "amount"),
    [
        ("integer", "{ge: 9223372036854775807}", 2**63 - 1),
        ("integer", "{le: -9223372036854775807}", -(2**63) + 1),
        ("number", "{gt: 9223372036854775807}", 1.0e19),  # a float of a number is not bounded
    ],
)
def test_a_rule_met_by_a_value_a_call_may_give_is_no_mismatch(kind: str, rule: str, amount: float) -> None:
    """The greatest and the least integer a call may give, and a float beyond 2**63 for a
    ``number``, meet their rules: no finding, and the run time allows the call."""
    text = _policy(kind, rule, "{eq: 5}")
    assert _mismatches(text) == []
    assert _outcome(text, amount) == "allow"


def test_a_gate_condition_no_integer_a_call_may_give_meets_is_a_type_mismatch() -> None:
    """The same for a gate's ``when``: ``amount > 9223372036854775807`` holds for no integer a
    call may give, so the gate applies only to a call without ``amount`` (here, none)."""
    text = _policy("integer", "{ge: 0}", "{gt: 9223372036854775807}")
    assert _mismatches(text) == [
        "approval gate big: amount of tool:payments.refund is an integer but the condition "
        '{"gt": 9223372036854775807} admits no integer a call may give (-2**63 < v < 2**63)'
    ]
    assert _outcome(text, 2**63 - 1) == "allow"
