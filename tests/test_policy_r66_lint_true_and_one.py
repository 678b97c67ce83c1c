"""Review R66: the approval lints kept what they had decided about a constraint by the
constraint, and ``Constraint(eq=True) == Constraint(eq=1)`` (Python's ``True == 1``), though
one allows a boolean and the other a number: what was decided for one answered for the other."""

from __future__ import annotations

from agentgate.findings import Finding
from agentgate.policy import parse_policy
from agentgate.policy._lint import RULES, lint


def found(code: str, text: str) -> list[Finding]:
    return lint(parse_policy(text, source="p.yaml"), tuple(rule for rule in RULES if rule.code == code))


TOOLS = """version: 1
principals:
  alice: {kind: human}
  bob: {kind: human, roles: [r]}
tools:
  pay.t0: {args: {x: {type: integer}}}
  pay.t1: {args: {x: {type: integer}}}
roles:
  r:
    ttl_s: 60
    capabilities:
      - {resource: 'tool:pay.*', constraints: {x: {eq: true}}}
      - {resource: 'tool:pay.*', constraints: {x: {eq: 1}}}
"""


def test_a_rule_on_one_is_not_judged_as_a_rule_on_true() -> None:
    """Review R66: ``x = true`` admits no call on an integer ``x``; that answer, kept by the
    constraint, was then given for ``x = 1``, which does, so the rule that gets around the gate
    (``x`` in ``[1]``) through ``tool:pay.t1`` drew no ``approval_gate_bypass``."""
    gate = "approvals:\n  g: {resource: tool:pay.t0, approvers: [alice], when: {x: {in: [1]}}}\n"
    messages = [f.message for f in found("approval_gate_bypass", TOOLS + gate)]
    assert len(messages) == 1, messages
    assert messages[0].startswith("role r rule 2: tool:pay.* where x = 1 ")


def test_an_approvers_rule_on_one_is_not_merged_with_a_rule_on_true() -> None:
    """Review R66: ``approval_unreachable`` grouped an approver's rules by their constraints, so
    ``x = 1`` joined the group of ``x = true`` and was judged as it (no call on an integer ``x``):
    bob, who may call ``tool:pay.t0`` with ``x = 1`` and is the gate's only other approver of a
    quorum of 2, drew no warning."""
    gate = (
        "approvals:\n  g: {resource: tool:pay.t0, approvers: [alice, bob], quorum: 2, when: {x: {in: [1]}}}\n"
    )
    messages = [f.message for f in found("approval_unreachable", TOOLS + gate)]
    assert len(messages) == 1, messages
    assert "(role r rule 2: tool:pay.* where x = 1 " in messages[0]
