"""Review R65: the work of ``approval_gate_bypass`` on siblings that declare the same arguments.

Work is counted (Python and C function calls, ``sys.setprofile``), never timed.
"""

from __future__ import annotations

from test_policy_scale import calls_made

from agentgate.policy import parse_policy
from agentgate.policy._lint import lint

GATES, RULES = 4, 4


def siblings_policy(tools: int) -> str:
    """``GATES`` gates, each on its own tool, and ``RULES`` rules on ``tool:pay.*``, which names
    ``tools`` tools that all declare the same arguments."""
    lines = ["version: 1", "principals:", "  alice: {kind: human}", "tools:"]
    lines += [
        f"  pay.t{j}: {{args: {{amount: {{type: number}}, n: {{type: integer}}}}}}" for j in range(tools)
    ]
    lines += ["roles:", "  r:", "    ttl_s: 60", "    capabilities:"]
    lines += [
        f"      - {{resource: 'tool:pay.*', constraints: {{amount: {{gt: {k}, le: {k + 1}}}, n: {{ge: {k}}}}}}}"
        for k in range(RULES)
    ]
    lines += ["approvals:"]
    lines += [
        f"  g{g}: {{resource: tool:pay.t{g}, approvers: [alice], when: {{n: {{in: [{g}]}}}}}}"
        for g in range(GATES)
    ]
    return "\n".join(lines) + "\n"


def bypass_work(tools: int) -> tuple[int, int]:
    policy = parse_policy(siblings_policy(tools), source="p.yaml")
    found: list[int] = []
    work = calls_made(lambda: found.append(sum(f.code == "approval_gate_bypass" for f in lint(policy))))
    return work, found[0]


def test_a_rule_is_judged_once_for_siblings_that_declare_the_same_arguments() -> None:
    """Review R65: whether a wildcard rule admits a call a gate would stop was decided anew for
    every sibling tool, for every rule, for every gate (a constraint built and intersected each
    time): a 51 KB policy of 200 gates, 200 tools and 64 rules took four minutes to lint. It
    depends only on the types the sibling declares for the arguments the rule constrains, so it
    is decided once for each such types; what remains per sibling is a few look-ups."""
    (small, found_small), (large, found_large) = bypass_work(20), bypass_work(80)
    assert found_small == found_large == 10  # rule k (n >= k) around gate g (n in [g]) for k <= g
    per_sibling = (large - small) / (60 * GATES * RULES)
    assert per_sibling < 40, per_sibling
