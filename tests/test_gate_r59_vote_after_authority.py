"""No approver's vote is recorded for a call the authority refuses (review R59).

Under an approval gate whose quorum is above one, ``Gate.authorize`` records each approval
presented as one approver's vote (an ``approval_given`` entry) in a transaction of its own,
before the decision's. It did so before the authority engine had decided the call: a chain whose
root the Gate no longer trusts (its anchor rotated out) had lead's vote recorded and audited as
given, then the call refused ``untrusted_root``; the gateway decides the authority first and
records no vote. The Gate now asks the authority first when a vote would be recorded, and
refuses with its reason, recording nothing but the refusal (which closes the call's request).

Real components: two Gates, one after the other, over one SQLite store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import issue
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

REFUND = Call.tool("refund", {"amount": 5})


def _policy(keys: dict[str, SigningKey]) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  sup: {{kind: agent, did: "{keys["sup"].did}", roles: [sup]}}
  lead: {{kind: human, did: "{keys["lead"].did}", roles: []}}
  lead2: {{kind: human, did: "{keys["lead2"].did}", roles: []}}
tools:
  refund: {{args: {{amount: {{type: integer}}}}}}
roles:
  sup:
    kind: agent
    capabilities: [{{resource: tool:refund}}]
    ttl_s: 3600
approvals:
  big:
    resource: tool:refund
    approvers: [lead, lead2]
    quorum: 2
"""


def _gate(path: Path, keys: dict[str, SigningKey], anchor: str) -> Gate:
    return Gate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(path), trust_anchors=[anchor])


@dataclass
class Asked:
    path: Path
    keys: dict[str, SigningKey]
    sup: AgentIdentity
    request: dict[str, Any]

    def gate(self, anchor: str) -> Gate:
        return _gate(self.path, self.keys, self.keys[anchor].did)

    def vote(self, approver: str) -> Approval:
        return Approval.sign(self.request, self.keys[approver])


@pytest.fixture
def asked(tmp_path: Path) -> Asked:
    """sup's refund asked for approval (quorum 2) by a Gate that trusts root."""
    keys = {name: SigningKey.generate() for name in ("root", "sup", "lead", "lead2", "rotated")}
    sup = AgentIdentity("sup", keys["sup"], issue(keys["root"], keys["sup"].public, ["tool:refund"], ttl=600))
    with _gate(tmp_path / "s.db", keys, keys["root"].did) as gate:
        auth = gate.authorize(sup, REFUND, call_id="c1")
    assert auth.needs_approval and auth.request is not None
    return Asked(tmp_path / "s.db", keys, sup, dict(auth.request))


def test_no_vote_is_recorded_for_a_call_the_authority_refuses(asked: Asked) -> None:
    """Review R59: lead's vote was recorded (approval_given) for a call then refused untrusted_root."""
    with asked.gate("rotated") as gate:
        auth = gate.authorize(asked.sup, REFUND, call_id="c1", approval=asked.vote("lead"))
        assert auth.verdict == "deny" and [f.code for f in auth.findings] == ["untrusted_root"]
        gate.flush()
        assert [e.kind for e in gate.audit.entries()] == ["approval_required", "deny"]
        assert gate.approvals.votes(asked.request["id"])[0] == ()


def test_a_vote_for_a_call_the_authority_allows_is_recorded_as_before(asked: Asked) -> None:
    with asked.gate("root") as gate:
        auth = gate.authorize(asked.sup, REFUND, call_id="c1", approval=asked.vote("lead"))
        assert auth.needs_approval
        gate.flush()
        assert [e.kind for e in gate.audit.entries()] == ["approval_required", "approval_given"]
        auth = gate.authorize(asked.sup, REFUND, call_id="c1", approval=asked.vote("lead2"))
        assert auth.allowed, auth.explain()
