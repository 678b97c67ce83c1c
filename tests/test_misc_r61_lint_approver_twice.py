"""The lint warning ``approver_listed_twice`` (agentgate/policy/_lint/_approvals.py): an approval
gate that names the same approver more than once."""

from __future__ import annotations

from agentgate.findings import Severity
from agentgate.policy import lint, parse_policy

POLICY = """\
version: 1
principals:
  alice: {kind: human, roles: [clerk]}
  bob: {kind: human}
  carol: {kind: human}
tools:
  tickets.close: {}
roles:
  clerk:
    capabilities: [{resource: tool:tickets.close}]
approvals:
  close:
    resource: tool:tickets.close
    approvers: APPROVERS
"""


def _twice(approvers: str) -> list[tuple[int | None, str, Severity]]:
    policy = parse_policy(POLICY.replace("APPROVERS", approvers), source="p.yaml")
    return [(f.line, f.message, f.severity) for f in lint(policy) if f.code == "approver_listed_twice"]


def test_an_approver_listed_twice_is_a_warning_at_the_second_entry() -> None:
    """Review R61: ``approvers: [bob, bob]`` loaded with no finding, though bob counts once toward
    the quorum: the list reads as two sign-offs and gives one. A warning, once per name, at the
    line of its second entry, naming the gate, the approver and the entries."""
    assert _twice("[bob, bob]") == [
        (
            14,
            "approval gate close lists approver bob twice (entries 1 and 2): an approver counts "
            "once toward the quorum, so the list names fewer people than it reads",
            Severity.WARNING,
        )
    ]
    block = "\n      - bob\n      - carol\n      - bob\n      - bob"
    ((line, message, _),) = _twice(block)
    assert line == 17
    assert message.startswith("approval gate close lists approver bob 3 times (entries 1, 3 and 4)")


def test_approvers_each_listed_once_draw_no_finding() -> None:
    """Review R61: distinct approvers are not reported."""
    assert _twice("[bob, carol]") == []
    assert _twice("[bob]") == []
