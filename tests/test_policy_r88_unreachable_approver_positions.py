"""Review R88: ``approval_unreachable`` reads a gate's approvers once, not once per finding.

For each approver it reported, the rule listed the gate's approvers again
(``dict.fromkeys``) to count the others and searched them (``index``) for the approver's line:
quadratic in a gate's entries (a gate of 1,000 approvers written after 20,000 repeated entries,
within the 50,000-node limit: 0.8 s). Each gate's distinct approvers and the position each is
first listed at are now found once. The findings are as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import SupportsIndex

from agentgate.findings import Finding
from agentgate.keys import SigningKey
from agentgate.policy import Policy, parse_policy
from agentgate.policy._lint import RULES, lint

UNREACHABLE = tuple(rule for rule in RULES if rule.code == "approval_unreachable")
_DID = SigningKey.generate().did


def _policy(approvers: list[str], quorum: int) -> Policy:
    """A gate on tool:pay that ``approvers`` guard with ``quorum``; each of p0..p(n-1), named
    there, may pay (role r)."""
    names = sorted(set(approvers), key=lambda a: int(a[1:]))
    lines = [
        "version: 1",
        "name: p",
        "tools:",
        "  pay: {}",
        "roles:",
        "  r:",
        "    kind: human",
        "    capabilities:",
        "      - resource: tool:pay",
        "principals:",
    ]
    lines += [f"  {name}: {{kind: human, roles: [r]}}" for name in names]
    lines += ["approvals:", "  g:", "    resource: tool:pay", f"    quorum: {quorum}", "    approvers:"]
    lines += [f"      - {approver}" for approver in approvers]
    return parse_policy("\n".join(lines) + "\n", source="p.yaml")


def _found(policy: Policy) -> list[tuple[int | None, str]]:
    return [(f.line, f.message) for f in lint(policy, UNREACHABLE)]


def test_each_approver_is_reported_once_on_the_line_it_is_first_listed() -> None:
    policy = _policy(["p0", "p1", "p0", "p2", "p1"], 3)
    first = policy.line_of("approvals", "g", "approvers", 0) or 0
    assert _found(policy) == [
        (
            first + at,
            f"{name} may make calls approval gate g stops (role r rule 1: tool:pay (line 9)), "
            f"and without {name} only 2 "
            "approver(s) remain for a quorum of 3: no approval of those calls can be valid, so "
            "they are denied",
        )
        for name, at in (("p0", 0), ("p1", 1), ("p2", 3))
    ]


class _CountedList(list[str]):
    """A list that counts the entries its iterations and searches pass over."""

    visited = 0

    def __iter__(self) -> Iterator[str]:
        for item in super().__iter__():
            _CountedList.visited += 1
            yield item

    def index(self, value: str, start: SupportsIndex = 0, stop: SupportsIndex = 2**62) -> int:
        at = super().index(value, start, stop)
        _CountedList.visited += at + 1
        return at


def test_a_gate_s_entries_are_read_a_bounded_number_of_times_whatever_its_findings() -> None:
    approvers = ["p0"] * 400 + [f"p{i}" for i in range(100)]
    policy = _policy(approvers, 100)
    expected = _found(policy)
    assert len(expected) == 100
    gate = policy.document.approvals["g"]
    object.__setattr__(gate, "approvers", _CountedList(gate.approvers))
    _CountedList.visited = 0
    found: list[Finding] = list(lint(policy, UNREACHABLE))
    assert [(f.line, f.message) for f in found] == expected
    # Once per finding, the 100 findings read 500 entries each: 50,000 and more.
    assert _CountedList.visited <= 3 * len(approvers)
