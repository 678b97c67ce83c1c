"""Review R83: ``approval_gate_bypass`` (agentgate/policy/_lint/_approvals.py) looks up the
sibling tools that take a gate's arguments among the tools declaring them, instead of walking
every tool a rule's pattern names for each gate that looks at other arguments.

Work is counted (Python and C function calls, ``sys.setprofile``), never timed.
"""

from __future__ import annotations

from test_policy_scale import calls_made

from agentgate.policy import lint, parse_policy
from agentgate.policy._lint import ApprovalGateBypass
from agentgate.policy._load import Policy

BYPASS = (ApprovalGateBypass(),)


def gates_on_own_arguments(tools: int, rules: int, extra: str = "") -> Policy:
    """``tools`` tools, each declaring its own argument and guarded by its own gate looking at
    it, and ``rules`` rules on ``tool:*`` each constraining one of them: perf3.py of the R83
    review, small. ``extra`` adds tool declarations."""
    lines = ["version: 1", "principals:", "  alice: {kind: human}", "tools:"]
    lines += [f"  t{i}: {{args: {{a{i}: {{type: integer}}}}}}" for i in range(tools)]
    lines += [extra] if extra else []
    lines += ["roles:", "  r:", "    ttl_s: 60", "    capabilities:"]
    lines += [
        f"      - {{resource: 'tool:*', constraints: {{a{k}: {{le: {k + 10}}}}}}}" for k in range(rules)
    ]
    lines += ["approvals:"]
    lines += [
        f"  g{i}: {{resource: tool:t{i}, approvers: [alice], when: {{a{i}: {{gt: 0}}}}}}"
        for i in range(tools)
    ]
    return parse_policy("\n".join(lines) + "\n", source="p.yaml")


def test_the_work_grows_with_the_gates_not_with_gates_times_tools() -> None:
    """Review R83: the siblings taking a gate's arguments were found by walking every tool the
    rule's pattern names, once for each gate and rule, when the gates looked at different
    arguments: 1,000 tools and gates with 60 rules on ``tool:*`` took 43 s (118 KB). Twice the
    tools and gates now cost about twice the work (it was four times)."""
    medium, large = gates_on_own_arguments(40, 8), gates_on_own_arguments(80, 8)
    found: list[object] = []
    work_medium = calls_made(lambda: found.extend(lint(medium, BYPASS)))
    work_large = calls_made(lambda: found.extend(lint(large, BYPASS)))
    assert found == []
    assert work_large < 2.5 * work_medium, work_large / work_medium


def test_a_sibling_declaring_the_gates_argument_is_still_a_path_around_it() -> None:
    """Looking siblings up by argument finds the same ones: tool:u0 and tool:u1 declare ``a0``,
    the argument gate g0 looks at, so the rule on ``a0`` admits on them a call g0 would stop on
    tool:t0; tool:u2 declares it as text, on which ``a0 <= 10`` admits nothing. The rules on
    the other arguments admit nothing on the siblings, which do not declare them."""
    extra = "\n".join(
        [
            "  u0: {args: {a0: {type: integer}}}",
            "  u1: {args: {a0: {type: number}, a3: {type: string}}}",
            "  u2: {args: {a0: {type: string}}}",
        ]
    )
    found = lint(gates_on_own_arguments(3, 3, extra), BYPASS)
    assert [(f.line, f.message) for f in found] == [
        (
            15,
            "role r rule 1: tool:* where a0 <= 10 (line 15) reaches tool:u0, tool:u1, which take the "
            "same arguments as tool:t0 but pass no approval gate g0",
        )
    ]
