"""Review R88: ``Gate.decline`` took an authorization changed after the decision
(``dataclasses.replace`` with another call, or another call's decision): it closed the real
request as denied and wrote a ``deny`` naming the other call, with the request's arguments'
digest, referring to the request's ``approval_required`` entry. An authorization waiting for
approval is now sealed as an allow is, and ``decline`` refuses a copy that does not match its
seal with ``InputError``, writing nothing; the request stays open for the call it names."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}"}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
  pay:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
      - resource: tool:pay
    ttl_s: 3600
approvals:
  big-refund:
    resource: tool:refund
    approvers: [lead]
    expiry_s: 600
"""
REFUND = Call.tool("refund", {"amount": 800})


@pytest.fixture
def desk(store: Store) -> Iterator[tuple[Gate, AgentIdentity]]:
    """A Gate on ``POLICY`` and its agent."""
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead")}
    with Gate(parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()})), store) as gate:
        yield gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")


@pytest.mark.parametrize("change", ["call", "decision"])
def test_a_changed_authorization_is_not_declined_and_nothing_is_written(
    desk: tuple[Gate, AgentIdentity], change: str
) -> None:
    gate, agent = desk
    asked = gate.authorize(agent, REFUND, call_id="c1")
    other = gate.authorize(agent, Call.tool("refund", {"amount": 900}), call_id="c2")
    assert asked.needs_approval and asked.request is not None and other.needs_approval
    forged = (
        replace(asked, call=Call.tool("pay", {"amount": 1}))
        if change == "call"
        else replace(asked, decision=other.decision)
    )
    gate.flush()
    size = gate.audit.size()

    with pytest.raises(InputError, match="not decided by this Gate"):
        gate.decline(forged, "no")

    gate.flush()
    assert gate.audit.size() == size
    assert gate.approvals.get(asked.request["id"]).state == "pending"


def test_the_authorization_authorize_returned_is_declined_with_its_own_call(
    desk: tuple[Gate, AgentIdentity],
) -> None:
    gate, agent = desk
    asked = gate.authorize(agent, REFUND, call_id="c1")
    assert asked.audit_index is not None and asked.request is not None

    declined = gate.decline(asked, "no")

    assert declined.audit_index is not None
    request, deny = gate.audit.entry(asked.audit_index), gate.audit.entry(declined.audit_index)
    assert (deny.kind, deny.ref) == ("deny", asked.audit_index)
    assert deny.resource == request.resource == "tool:refund"
    assert deny.args_digest == request.args_digest
    assert gate.approvals.get(asked.request["id"]).state == "denied"
