"""Review R65b: ``constraint_type_mismatch`` on a rule whose pattern names many tools that declare
the argument with the same type: one finding for each argument and type, and work that does not
grow with a check per tool."""

from __future__ import annotations

from test_policy_r65b_lint_scale import calls_made

from agentgate.policy import parse_policy
from agentgate.policy._lint import RULES, lint

MISMATCH = tuple(rule for rule in RULES if rule.code == "constraint_type_mismatch")


def pattern_policy(tools: int) -> str:
    """``tools`` tools under ``tool:pay.*`` declaring ``amount`` a number (the last also
    ``cur`` a string), and a rule on the pattern bounding ``amount`` by a prefix and ``cur`` by a
    number: neither admits a value of its declared type."""
    lines = ["version: 1", "tools:"]
    lines += [f"  pay.t{j}: {{args: {{amount: {{type: number}}}}}}" for j in range(tools - 1)]
    lines += [f"  pay.t{tools - 1}: {{args: {{amount: {{type: number}}, cur: {{type: string}}}}}}"]
    lines += ["roles:", "  r:", "    ttl_s: 60", "    capabilities:"]
    lines += ["      - {resource: 'tool:pay.*', constraints: {amount: {prefix: x}, cur: {gt: 1}}}"]
    return "\n".join(lines) + "\n"


def test_a_rule_on_a_pattern_is_reported_once_for_each_argument_and_type() -> None:
    """Review R65b: the rule was reported once for each tool its pattern names, the same message
    each time (three tools, three identical findings); it is reported once for each argument and
    declared type, in the order the tools first declare them."""
    found = lint(parse_policy(pattern_policy(3), source="p.yaml"), MISMATCH)
    assert [f.message.split("): ", 1)[1] for f in found] == [
        'amount is a number but the constraint {"prefix": "x"} admits no number',
        'cur is a string but the constraint {"gt": 1} admits no string',
    ]


def test_the_work_does_not_grow_with_a_check_per_tool() -> None:
    """Review R65b: each tool the pattern names was checked against each constraint of the rule
    (rules x tools type checks): 300 more tools cost fewer than 12 calls each."""
    small_policy = parse_policy(pattern_policy(20), source="p.yaml")
    large_policy = parse_policy(pattern_policy(320), source="p.yaml")
    small = calls_made(lambda: lint(small_policy, MISMATCH))
    large = calls_made(lambda: lint(large_policy, MISMATCH))
    assert (large - small) / 300 < 12, (large - small) / 300
