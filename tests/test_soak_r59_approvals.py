"""Approval requests asked and never answered, over a long life: what a Gate keeps of them in
memory is bounded, and the bound changes no decision and no audit entry."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentgate.gate._approval_gates as approval_gates
from agentgate.capabilities import Call
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 3600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
    expiry_s: 3600
"""


def test_unanswered_approval_requests_kept_in_memory_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: every approval request nobody answered stayed in Gate._open_requests until it
    expired (a day's expiry_s at 10 requests a second: about 300 MiB); now the newest
    OPEN_REQUESTS_KEPT are kept, and the answer to an older one reads its asked entry from the store."""
    monkeypatch.setattr(approval_gates, "OPEN_REQUESTS_KEPT", 8, raising=False)
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="soak.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db", synchronous="NORMAL"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        asked = [
            gate.authorize(agent, Call.tool("refund", {"amount": 500 + i}), call_id=f"c{i}", run_id=f"t{i}")
            for i in range(30)
        ]
        assert all(a.needs_approval for a in asked)
        assert len(gate._open_requests) == 8, "every unanswered request is kept in memory"
        first = asked[0]  # no longer kept: answered all the same, its entry found in the store
        approval = Approval.parse(gate.approve(first.approval_payload(), keys["lead"]))
        allowed = gate.authorize(
            agent, Call.tool("refund", {"amount": 500}), call_id="c0", run_id="t0", approval=approval
        )
        assert allowed.allowed, allowed.reasons
        gate.flush()
        given = [e for e in gate.audit.entries() if e.kind == "approval_given"]
        assert [e.ref for e in given] == [first.audit_index]
        assert len(gate._open_requests) <= 8
    finally:
        gate.close()
