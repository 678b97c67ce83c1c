"""Review R66: ``approval_gate_bypass`` on many gates and many rules on one pattern: the rules a
gate is compared with are found by the numbers they allow, not by comparing every pair.

Work is counted (Python and C function calls, ``sys.setprofile``), never timed.
"""

from __future__ import annotations

from test_policy_scale import calls_made

from agentgate.findings import Finding
from agentgate.policy import parse_policy
from agentgate.policy._lint import RULES, lint

BYPASS = tuple(rule for rule in RULES if rule.code == "approval_gate_bypass")
TOOLS = 16


def gates_and_rules_policy(gates: int, rules: int, first_n: int) -> str:
    """``TOOLS`` tools under ``tool:pay.*`` that declare the same arguments; ``rules`` rules on the
    pattern (``amount`` in ``(k, k + 1]``, ``n >= first_n + k``), 50 to a role; and ``gates``
    gates, gate ``g`` on tool ``g mod TOOLS`` for ``n`` in ``[g, g + 1]``."""
    lines = ["version: 1", "principals:", "  alice: {kind: human}", "tools:"]
    lines += [
        f"  pay.t{j}: {{args: {{amount: {{type: number}}, cur: {{type: string}}, n: {{type: integer}}}}}}"
        for j in range(TOOLS)
    ]
    lines += ["roles:"]
    for k in range(rules):
        if k % 50 == 0:
            lines += [f"  r{k // 50}:", "    ttl_s: 60", "    capabilities:"]
        lines += [
            f"      - {{resource: 'tool:pay.*', constraints: {{amount: {{gt: {k}, le: {k + 1}}}, "
            f"n: {{ge: {first_n + k}}}}}}}"
        ]
    lines += ["approvals:"]
    lines += [
        f"  g{g}: {{resource: tool:pay.t{g % TOOLS}, approvers: [alice], "
        f"when: {{amount: {{gt: {g % 50}}}, n: {{in: [{g}, {g + 1}]}}, cur: {{prefix: c}}}}}}"
        for g in range(gates)
    ]
    return "\n".join(lines) + "\n"


def bypass(gates: int, rules: int, first_n: int) -> tuple[int, list[Finding]]:
    policy = parse_policy(gates_and_rules_policy(gates, rules, first_n), source="p.yaml")
    found: list[Finding] = []
    work = calls_made(lambda: found.extend(lint(policy, BYPASS)))
    return work, found


def test_gates_and_rules_that_share_no_number_are_not_compared_pair_by_pair() -> None:
    """Review R66: every gate was compared with every rule on a pattern naming a tool it guards
    (a constraint typed and intersected per pair): 1,000 gates and 1,000 rules on 64 tools took
    7.5 to 8.5 s to lint with no finding. A gate is now compared only with the rules whose numbers
    can meet its condition on one argument (found by bisection), and with those that leave that
    argument open or constrain it otherwise: twice the gates and rules cost about twice the work,
    not four times."""
    (small, found_small), (large, found_large) = bypass(100, 100, 10_000), bypass(200, 200, 10_000)
    assert found_small == found_large == []
    assert large / small < 2.6, (small, large)


def test_the_rules_whose_numbers_meet_the_gate_are_still_found() -> None:
    """Review R66: the look-up keeps every rule that may admit a gated call: rule ``k`` (``n >=
    k``) gets around gate ``g`` (``n`` in ``[g, g + 1]``) when ``k <= g + 1`` and its ``amount``
    range meets ``amount > g mod 50``, in the order the policy lists the rules."""
    _work, found = bypass(20, 20, 0)
    expected = [(g, k) for g in range(20) for k in range(20) if k <= g + 1 and k + 1 > g % 50]
    got = [
        (int(f.message.rsplit(" gate g", 1)[1]), int(f.message.split(" rule ")[1].split(":")[0]) - 1)
        for f in found
    ]
    assert got == expected
