"""Review R65b: ``approval_gate_bypass`` on many gates, rules and sibling tools that declare the
same arguments: the work per sibling is not multiplied by the rules, and a finding lists a bounded
number of siblings.

Work is counted (Python and C function calls, ``sys.setprofile``), never timed.
"""

from __future__ import annotations

from test_policy_scale import calls_made

from agentgate.findings import Finding
from agentgate.policy import parse_policy
from agentgate.policy._lint import RULES, lint

BYPASS = tuple(rule for rule in RULES if rule.code == "approval_gate_bypass")


def gated_siblings_policy(tools: int, gates: int, rules: int) -> str:
    """``tools`` tools under ``tool:pay.*`` that declare the same arguments, each of the first
    ``gates`` with its own gate (``n`` in its own two values), and ``rules`` rules on the pattern
    (``n`` in 20 values from ``k``): perf2.py of the R65b brief, small."""
    lines = ["version: 1", "principals:", "  alice: {kind: human}", "tools:"]
    lines += [
        f"  pay.t{j}: {{args: {{amount: {{type: number}}, cur: {{type: string}}, n: {{type: integer}}}}}}"
        for j in range(tools)
    ]
    lines += ["roles:", "  r:", "    ttl_s: 60", "    capabilities:"]
    lines += [
        f"      - {{resource: 'tool:pay.*', constraints: {{amount: {{gt: {k}, le: {k + 1}}}, "
        f"n: {{in: [{', '.join(str(x) for x in range(k, k + 20))}]}}}}}}"
        for k in range(rules)
    ]
    lines += ["approvals:"]
    lines += [
        f"  g{g}: {{resource: tool:pay.t{g}, approvers: [alice], "
        f"when: {{amount: {{gt: {g % 50}}}, n: {{in: [{g}, {g + 1}]}}, cur: {{prefix: c}}}}}}"
        for g in range(gates)
    ]
    return "\n".join(lines) + "\n"


def bypass(tools: int, gates: int, rules: int) -> tuple[int, list[Finding]]:
    policy = parse_policy(gated_siblings_policy(tools, gates, rules), source="p.yaml")
    found: list[Finding] = []
    work = calls_made(lambda: found.extend(lint(policy, BYPASS)))
    return work, found


def test_the_work_per_sibling_does_not_grow_with_the_rules_on_its_pattern() -> None:
    """Review R65b: each sibling of each rule of each gate was looked at once (gates x rules x
    tools): a 215 KB policy of 1,000 tools, 1,000 gates and 64 rules did not lint in 200 s. The
    siblings are grouped by what they declare, and a rule is decided once per group: 60 more
    siblings under 8 gates and 8 rules cost less than one call per sibling, rule and gate."""
    (small, found_small), (large, found_large) = bypass(20, 8, 8), bypass(80, 8, 8)
    assert len(found_small) == len(found_large) > 0
    per_sibling_rule_gate = (large - small) / (60 * 8 * 8)
    assert per_sibling_rule_gate < 1, per_sibling_rule_gate


def test_a_finding_lists_twenty_siblings_and_how_many_more() -> None:
    """Review R65b: a finding listed every sibling it reaches, so the output grew as gates x rules
    x tools; it lists the first 20 in order and says how many more, as a load error lists names."""
    _work, found = bypass(30, 1, 1)
    assert len(found) == 1
    listed = found[0].message.split(" reaches ")[1].split(", which take")[0]
    names = sorted(f"tool:pay.t{j}" for j in range(1, 30))
    assert listed == ", ".join(names[:20]) + ", and 9 more"


def test_a_finding_lists_every_sibling_when_there_are_twenty_or_fewer() -> None:
    """Review R65b: the cap leaves a short list as it was."""
    _work, found = bypass(21, 1, 1)
    listed = found[0].message.split(" reaches ")[1].split(", which take")[0]
    assert listed == ", ".join(sorted(f"tool:pay.t{j}" for j in range(1, 21)))
