"""Review R65b: the work of ``approval_unreachable`` on an approver who holds many rules that
reach none of the gated tools. Work is counted (Python and C function calls), never timed."""

from __future__ import annotations

from test_policy_r65b_lint_scale import calls_made

from agentgate.policy import parse_policy
from agentgate.policy._lint import RULES, lint

UNREACHABLE = tuple(rule for rule in RULES if rule.code == "approval_unreachable")
GATES = 32


def approver_policy(other_rules: int) -> str:
    """``GATES`` gates of quorum 2 on tools under ``tool:pay.*``, whose approvers are alice and
    the agent p, who may pay (one finding per gate) and holds, before that rule, ``other_rules``
    rules on patterns of their own (``tool:o{i}.*``, one tool each) that reach no gated tool."""
    lines = [
        "version: 1",
        "principals:",
        "  alice: {kind: human}",
        "  p: {kind: human, roles: [r]}",
        "tools:",
    ]
    lines += [f"  pay.t{g}: {{args: {{amount: {{type: number}}}}}}" for g in range(GATES)]
    lines += [f"  o{i}.t: {{args: {{amount: {{type: number}}}}}}" for i in range(other_rules)]
    lines += ["roles:", "  r:", "    ttl_s: 60", "    capabilities:"]
    lines += [
        f"      - {{resource: 'tool:o{i}.*', constraints: {{amount: {{le: {i}}}}}}}"
        for i in range(other_rules)
    ]
    lines += ["      - {resource: 'tool:pay.*'}"]
    lines += ["approvals:"]
    lines += [
        f"  g{g}: {{resource: tool:pay.t{g}, approvers: [alice, p], quorum: 2, when: {{amount: {{gt: 5}}}}}}"
        for g in range(GATES)
    ]
    return "\n".join(lines) + "\n"


def unreachable_work(other_rules: int) -> tuple[int, int]:
    policy = parse_policy(approver_policy(other_rules), source="p.yaml")
    found: list[int] = []
    work = calls_made(lambda: found.append(len(lint(policy, UNREACHABLE))))
    return work, found[0]


def test_a_gate_is_not_compared_with_rules_that_reach_none_of_its_tools() -> None:
    """Review R65b: each gate was compared with every kind of call each of its approvers may make
    (an intersection of the gated tools with all the tools each reaches: gates x rules x tools,
    11 s of a 157 KB policy's lint); it looks up only those that reach a tool it guards. 60 more
    rules elsewhere cost the 32 gates less than one call per rule and gate."""
    (small, found_small), (large, found_large) = unreachable_work(20), unreachable_work(80)
    assert found_small == found_large == GATES
    per_rule_gate = (large - small) / (60 * GATES)
    assert per_rule_gate < 1, per_rule_gate
