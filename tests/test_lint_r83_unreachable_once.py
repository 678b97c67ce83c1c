"""Review R83: ``approval_unreachable`` (agentgate/policy/_lint/_approvals.py) finds what an
approver may call once for each set of roles approvers hold, not once for each approver, and
keeps it only while the approvers holding those roles are decided.

Work is counted (calls of ``_calls_held``), never timed.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from agentgate.policy import lint, parse_policy
from agentgate.policy._lint import _approvals
from agentgate.policy._lint._approvals import ApprovalUnreachable

UNREACHABLE = (ApprovalUnreachable(),)

# Six approvers hold role r, two hold s, one holds both, one none: four sets of roles. Each gate
# names one approver (quorum 1), so every approver that may call its tool leaves nobody to approve.
POLICY = """\
version: 1
principals:
  p0: {kind: human, roles: [r]}
  p1: {kind: human, roles: [r]}
  p2: {kind: human, roles: [r]}
  p3: {kind: human, roles: [r]}
  p4: {kind: human, roles: [r]}
  p5: {kind: human, roles: [r]}
  q0: {kind: human, roles: [s]}
  q1: {kind: human, roles: [s]}
  both: {kind: human, roles: [r, s]}
  none: {kind: human}
tools:
  pay.small: {args: {amount: {type: integer}}}
  pay.large: {args: {amount: {type: integer}}}
  ops.restart: {}
roles:
  r:
    ttl_s: 60
    capabilities: [{resource: "tool:pay.*", constraints: {amount: {le: 100}}}]
  s:
    ttl_s: 60
    capabilities: [{resource: "tool:ops.restart"}]
approvals:
  g-small-p0: {resource: tool:pay.small, approvers: [p0]}
  g-large-p1: {resource: tool:pay.large, when: {amount: {gt: 500}}, approvers: [p1]}
  g-large-p2: {resource: tool:pay.large, when: {amount: {gt: 50}}, approvers: [p2]}
  g-ops-p3: {resource: tool:ops.restart, approvers: [p3]}
  g-pay-p4: {resource: "tool:pay.*", approvers: [p4, p5], quorum: 2}
  g-ops-q: {resource: tool:ops.restart, approvers: [q0, q1], quorum: 2}
  g-any-both: {resource: "tool:*", approvers: [both]}
  g-ops-none: {resource: tool:ops.restart, approvers: [none]}
"""

EXPECTED = [
    (25, "p0", "g-small-p0"),
    (27, "p2", "g-large-p2"),
    (29, "p4", "g-pay-p4"),
    (29, "p5", "g-pay-p4"),
    (30, "q0", "g-ops-q"),
    (30, "q1", "g-ops-q"),
    (31, "both", "g-any-both"),
]


class _Table:
    """What ``_calls_held`` returns, unpacked as it is, but weakly referable: to see when it is let go."""

    def __init__(self, held: Any) -> None:
        self.held = held

    def __iter__(self) -> Iterator[Any]:
        return iter(self.held)


def test_what_an_approver_may_call_is_found_once_per_set_of_roles_and_let_go_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R83: the table of what an approver may call (each rule shape by each argument list
    it reaches) was built anew for every approver, however many held the same roles, and every
    table was kept until the check ended: a policy of 300 approvers of one role with 60 rules on
    ``tool:*`` over 1,000 tools took 111 s and 6.6 GB. It is built once per set of roles held
    (here four: r, s, r and s, none), and a table is no longer held when the next is built;
    the findings are those of each approver, in the order of the gates and their approvers."""
    original = _approvals._calls_held
    built: list[tuple[str, ...]] = []
    tables: list[weakref.ref[_Table]] = []

    def counted(policy: Any, roles: Any, by_pattern: Any) -> Any:
        gc.collect()
        assert all(table() is None for table in tables), "an earlier set of roles' table is still held"
        built.append(tuple(roles))
        table = _Table(original(policy, roles, by_pattern))
        tables.append(weakref.ref(table))
        return table

    monkeypatch.setattr(_approvals, "_calls_held", counted)
    found = lint(parse_policy(POLICY, source="p.yaml"), UNREACHABLE)
    assert sorted(built) == [(), ("r",), ("r", "s"), ("s",)]
    assert [(f.line, f.message.split()[0], f.message.split()[6]) for f in found] == EXPECTED


def test_each_approvers_finding_names_its_own_rule_and_count() -> None:
    """Sharing the table changes no message: each names the approver, the gate, the rule that
    admits the gated call and how many approvers remain."""
    found = lint(parse_policy(POLICY, source="p.yaml"), UNREACHABLE)
    assert found[0].message == (
        "p0 may make calls approval gate g-small-p0 stops (role r rule 1: tool:pay.* where amount <= 100 "
        "(line 20)), and without p0 only 0 approver(s) remain for a quorum of 1: no approval of those "
        "calls can be valid, so they are denied"
    )
    assert found[2].message.startswith("p4 may make calls approval gate g-pay-p4 stops (role r rule 1")
    assert "only 1 approver(s) remain for a quorum of 2" in found[3].message
