"""Lint of approval gates that no approval can satisfy for an approver's own calls (review R57)."""

from __future__ import annotations

import pytest

from agentgate.capabilities import Call
from agentgate.findings import FindingKind, Severity
from agentgate.policy import PolicyIndex, lint, parse_policy
from agentgate.policy._lint._approvals import ApprovalUnreachable, _admits_shape

ANCHOR = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"
ALICE = "did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj"
BOB = "did:key:z6MkkNV2MQswkwEnXrUkeM7T8qYE3qWB163VBePnsLBSTAru"

POLICY = f"""version: 1
trust_anchors:
  root: {{did: {ANCHOR}}}
principals:
  alice: {{kind: human, did: {ALICE}, roles: [lead]}}
  bob: {{kind: human, did: {BOB}, roles: [lead]}}
tools:
  payments.refund:
    args:
      amount: {{type: integer, required: true}}
roles:
  lead:
    kind: human
    capabilities:
      - resource: tool:payments.refund
        constraints: {{amount: {{le: LIMIT}}}}
    ttl_s: 3600
approvals:
  large-refund:
    resource: tool:payments.refund
    when: {{amount: {{gt: 500}}}}
    approvers:
      - alice
OTHER    quorum: QUORUM
"""


def _policy(limit: int, other: str | None, quorum: int) -> str:
    """alice approves, with ``other`` if given (its line is the one after alice's, 24)."""
    also = f"      - {other}\n" if other else ""
    return POLICY.replace("LIMIT", str(limit)).replace("OTHER", also).replace("QUORUM", str(quorum))


def test_an_approver_who_may_make_the_gated_call_with_no_one_else_to_approve_it_is_warned_of() -> None:
    """Review R57: a gate whose only approver may make the call it stops linted clean, while every
    such call of that approver is denied (nobody approves their own call)."""
    policy = parse_policy(_policy(10_000, None, 1), source="p.yaml")
    (finding,) = [f for f in lint(policy) if f.code == "approval_unreachable"]
    assert finding.kind is FindingKind.AUTHORITY_CHAIN_OPACITY and finding.severity is Severity.WARNING
    assert (finding.file, finding.line) == ("p.yaml", 23)
    assert (
        "alice" in finding.message and "large-refund" in finding.message and "quorum of 1" in finding.message
    )
    assert finding.hint is not None and "another approver" in finding.hint
    # What it warns of: the policy denies alice's own large refund outright.
    decision = PolicyIndex(policy).evaluate(ALICE, Call.tool("payments.refund", {"amount": 900}))
    assert decision.outcome.value == "deny"


def test_each_approver_who_would_leave_the_quorum_short_is_named_on_its_own_line() -> None:
    policy = parse_policy(_policy(10_000, "bob", 2), source="p.yaml")
    found = [(f.line, f.message.split()[0]) for f in lint(policy) if f.code == "approval_unreachable"]
    assert found == [(23, "alice"), (24, "bob")]


@pytest.mark.parametrize(
    ("limit", "other", "quorum"),
    [
        (10_000, "bob", 1),  # bob approves alice's call, and alice bob's
        (500, None, 1),  # the approver's own refunds never reach the gate
    ],
)
def test_a_gate_every_approver_can_get_approved_is_not_warned_of(
    limit: int, other: str | None, quorum: int
) -> None:
    policy = parse_policy(_policy(limit, other, quorum), source="p.yaml")
    assert [f.code for f in lint(policy)] == []


def _many_gates(n: int) -> str:
    """``n`` tools, an approver whose ``n`` rules (one per tool) never reach the gates, and ``n``
    gates on every tool, each with its own condition: no finding, and every gate against every
    rule and tool if checked pair by pair."""
    lines = ["version: 1", "tools:"] + [
        f"  t.x{i}: {{args: {{amount: {{type: integer}}}}}}" for i in range(n)
    ]
    lines += ["principals:", f"  lead: {{kind: human, did: {ALICE}, roles: [r]}}"]
    lines += ["roles:", "  r:", "    ttl_s: 60", "    capabilities:"]
    lines += [f"      - {{resource: 'tool:t.x{i}', constraints: {{amount: {{le: -1}}}}}}" for i in range(n)]
    lines += ["approvals:"]
    lines += [
        f"  g{i}: {{resource: 'tool:t.*', when: {{amount: {{gt: {i}}}}}, approvers: [lead]}}"
        for i in range(n)
    ]
    return "\n".join(lines) + "\n"


def test_the_check_is_not_gates_times_rules_times_tools() -> None:
    """Checked tool by tool and rule by rule, 1,000 such gates took 41 s to lint."""
    from test_policy_scale import calls_made

    def work(n: int) -> int:
        policy = parse_policy(_many_gates(n), source="many.yaml")
        _admits_shape.cache_clear()
        found: list[object] = []
        calls = calls_made(lambda: found.extend(ApprovalUnreachable().check(policy)))
        assert found == []
        return calls

    small = work(30)
    assert work(120) < 6 * small  # 4 times the policy; pair by pair it was 16 times the work
