"""Review R66: ``constraint_on_undeclared_argument`` and ``gate_on_undeclared_argument`` gave one
finding for each tool a wildcard rule or gate names: a rule on ``tool:pay.*`` naming an argument
none of 1,000 tools declares was 1,000 findings, the same words each time. A rule (or gate) now
has one finding for each set of missing arguments, naming the tools that lack them, the first 20
in the order they are declared and how many more, as ``approval_gate_bypass`` lists siblings.
"""

from __future__ import annotations

from agentgate.findings import Finding
from agentgate.policy import parse_policy
from agentgate.policy._lint import RULES, lint


def found(code: str, tools: int, *, gate: bool = False) -> list[Finding]:
    lines = ["version: 1", "principals:", "  alice: {kind: human}", "tools:"]
    lines += [f"  pay.t{j}: {{args: {{amount: {{type: number}}}}}}" for j in range(tools)]
    lines += ["  other: {args: {ammount: {type: number}}}"]
    lines += ["roles:", "  r:", "    ttl_s: 60", "    capabilities:"]
    lines += ["      - {resource: 'tool:pay.*', constraints: {ammount: {le: 5}}}"]
    if gate:
        lines += ["approvals:", "  g: {resource: 'tool:pay.*', approvers: [alice], when: {ammount: {gt: 5}}}"]
    policy = parse_policy("\n".join(lines) + "\n", source="p.yaml")
    return lint(policy, tuple(rule for rule in RULES if rule.code == code))


def test_a_wildcard_rule_on_an_undeclared_argument_is_one_finding() -> None:
    """Review R66: one finding for the rule, not one per tool its pattern names."""
    messages = [f.message for f in found("constraint_on_undeclared_argument", 30)]
    listed = ", ".join(f"tool:pay.t{j}" for j in range(20))
    assert messages == [
        f"role r rule 1: tool:pay.* where ammount <= 5 (line 40) constrains ammount, which {listed}, "
        "and 10 more do not declare: it never matches a call on them"
    ]


def test_a_rule_on_one_tool_reads_as_before() -> None:
    """Review R66: a pattern that names one tool keeps the message docs and editors know."""
    messages = [f.message for f in found("constraint_on_undeclared_argument", 1)]
    assert messages == [
        "role r rule 1: tool:pay.* where ammount <= 5 (line 11) constrains ammount, which tool:pay.t0 "
        "does not declare: it never matches"
    ]


def test_a_wildcard_gate_on_an_undeclared_argument_is_one_finding() -> None:
    """Review R66: the same for an approval gate's ``when``."""
    messages = [f.message for f in found("gate_on_undeclared_argument", 25, gate=True)]
    listed = ", ".join(f"tool:pay.t{j}" for j in range(20))
    assert messages == [f"approval gate g looks at ammount, which {listed}, and 5 more do not declare"]
