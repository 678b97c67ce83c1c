"""Review R83: ``approval_gate_bypass`` (agentgate/policy/_lint/_approvals.py) counts a sibling's
gate whose condition holds for every call, as the run time decides it (``_gate_applies``): one
every value of the argument's declared type meets, one that type cannot compare (the gate fails
closed), or one on an argument the sibling does not declare (no call gives it).
"""

from __future__ import annotations

import pytest

from agentgate.capabilities import Call
from agentgate.policy import PolicyIndex, lint, parse_policy
from agentgate.policy._lint import ApprovalGateBypass

BYPASS = (ApprovalGateBypass(),)

# Gate every-refund stops every call of payments.refund; the wildcard rule reaches
# payments.refund_partial too, which takes the same argument and has its own gate.
POLICY = """\
version: 1
principals:
  alice: {kind: human, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj}
  bot: {kind: agent, roles: [worker]}
tools:
  payments.refund: {args: {note: {type: TYPE}}}
  payments.refund_partial: {args: {note: {type: TYPE}, memo: {type: string}}}
roles:
  worker:
    ttl_s: 600
    capabilities: [{resource: "tool:payments.*"}]
approvals:
  every-refund:
    resource: tool:payments.refund
    approvers: [alice]
  every-partial:
    resource: tool:payments.refund_partial
    when: WHEN
    approvers: [alice]
"""

# A value of each type, at the ends of what a call may give, and none.
CALLS = {
    "string": [{}, {"note": ""}, {"note": "x"}, {"note": "\u202e"}],
    "integer": [{}, {"note": 0}, {"note": 2**63 - 1}, {"note": -(2**63) + 1}],
    "number": [{}, {"note": 0.5}, {"note": 1.7976931348623157e308}, {"note": -1.7976931348623157e308}],
    "boolean": [{}, {"note": True}, {"note": False}],
}

APPLIES_TO_EVERY_CALL = [
    ("string", '{note: {prefix: ""}}'),  # every text starts with ""
    ("string", "{note: {lt: 500}}"),  # a bound cannot compare text: fails closed
    ("integer", '{note: {prefix: "a"}}'),  # a prefix cannot compare a number
    ("integer", "{note: {ge: -9223372036854775807}}"),  # every integer a call may give
    ("integer", "{note: {gt: -9.3e18, le: 9223372036854775807}}"),
    ("number", "{note: {ge: -1.7976931348623157e308}}"),  # every finite number
    ("boolean", "{note: {in: [true, false]}}"),
    ("boolean", '{note: {eq: "yes"}}'),  # text cannot compare a boolean
    ("string", '{amount: {gt: 5}, note: {prefix: ""}}'),  # amount: not declared, never given
]

SOME_CALLS_PASS = [
    ("string", '{note: {prefix: "a"}}'),
    ("string", '{note: {in: ["", x]}}'),  # a few texts only, however they are chosen
    ("integer", "{note: {ge: -9223372036854775806}}"),  # not -(2**63) + 1
    ("integer", "{note: {in: [-9223372036854775807, 9223372036854775807]}}"),
    ("number", "{note: {gt: -1e308}}"),
    ("boolean", "{note: {eq: true}}"),
    ("string", '{memo: {prefix: ""}, note: {prefix: "a"}}'),
]


def _bypass(kind: str, when: str) -> list[str]:
    policy = parse_policy(POLICY.replace("TYPE", kind).replace("WHEN", when), source="p.yaml")
    return [f.message for f in lint(policy, BYPASS)]


@pytest.mark.parametrize(("kind", "when"), APPLIES_TO_EVERY_CALL)
def test_a_sibling_gate_that_applies_to_every_call_is_no_path_around(kind: str, when: str) -> None:
    """Review R83: every-partial with ``note: {prefix: ""}`` applies to every call (each text
    starts with "", and a call without ``note`` needs approval too), yet lint reported the
    sibling as a path around every-refund: only a condition on an argument the guarding gate
    also looked at, as narrowly, counted. docs/lint.md: no finding where the sibling has a gate
    that applies to every call this one applies to. The run time agrees: each call needs approval."""
    assert _bypass(kind, when) == []
    policy = parse_policy(POLICY.replace("TYPE", kind).replace("WHEN", when), source="p.yaml")
    index = PolicyIndex(policy)
    for args in CALLS[kind]:
        decision = index.evaluate("bot", Call.tool("payments.refund_partial", args))
        assert decision.outcome.value == "approval_required", (args, decision)


@pytest.mark.parametrize(("kind", "when"), SOME_CALLS_PASS)
def test_a_sibling_gate_that_some_call_passes_is_still_a_path_around(kind: str, when: str) -> None:
    """A condition that some value of the type fails is no gate on every call: listed values are
    a few of infinitely many (two booleans are all there are), and a bound short of the least or
    greatest value a call may give (an integer within -2**63 < v < 2**63) lets a call through."""
    assert _bypass(kind, when) == [
        "role worker rule 1: tool:payments.* (line 11) reaches tool:payments.refund_partial, which "
        "take the same arguments as tool:payments.refund but pass no approval gate every-refund"
    ]


def test_a_guarding_gate_that_cannot_compare_the_siblings_type_stops_every_call_there() -> None:
    """The other way round: a guarding gate whose condition the sibling's declared type cannot
    compare applies there to every call, so a sibling gate must too. Gate g0's ``note`` condition
    holds for no value (a bound and a prefix), so it stops every call that gives ``note``; gate g1
    on the sibling stops only ``note < 1000``. Until review R83 g1 counted as at least as narrow
    as g0 (no value meets g0's condition) and lint said nothing, while ``note: 1000`` passes g1."""
    policy = parse_policy(
        """\
version: 1
principals:
  alice: {kind: human, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj}
  bot: {kind: agent, roles: [w]}
tools:
  pay.t0: {args: {note: {type: number}}}
  pay.t1: {args: {note: {type: number}}}
roles:
  w:
    ttl_s: 60
    capabilities: [{resource: "tool:pay.*"}]
approvals:
  g0: {resource: tool:pay.t0, approvers: [alice], when: {note: {lt: 5, prefix: a}}}
  g1: {resource: tool:pay.t1, approvers: [alice], when: {note: {lt: 1000}}}
""",
        source="p.yaml",
    )
    assert [f.message for f in lint(policy, BYPASS)] == [
        "role w rule 1: tool:pay.* (line 11) reaches tool:pay.t1, which take the same arguments as "
        "tool:pay.t0 but pass no approval gate g0"
    ]
    index = PolicyIndex(policy)
    assert index.evaluate("bot", Call.tool("pay.t0", {"note": 1000})).outcome.value == "approval_required"
    assert index.evaluate("bot", Call.tool("pay.t1", {"note": 1000})).outcome.value == "allow"
