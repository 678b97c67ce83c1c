"""Review R82: ``Gate.decline`` of an approval request that expired unanswered wrote a ``deny``
entry and left the stored request ``pending``, so each further decline of it wrote another
``deny`` (its docstring and docs/langgraph.md promise that a request decided meanwhile is not
declined a second time). The first decline now closes it as declined (``denied`` by
``agentgate:declined``), in the transaction of its ``deny``; a second is an ``InputError`` and
writes nothing, as for any decided request."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity, Authorization, Gate
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
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
    ttl_s: 3600
approvals:
  big-refund:
    resource: tool:refund
    approvers: [lead]
    expiry_s: 60
"""
REFUND = Call.tool("refund", {"amount": 800})


@pytest.fixture
def desk(store: Store) -> Iterator[tuple[Gate, AgentIdentity]]:
    """A Gate on ``POLICY`` and its agent."""
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead")}
    with Gate(parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()})), store) as gate:
        yield gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")


def _asked_then_expired(desk: tuple[Gate, AgentIdentity], monkeypatch: pytest.MonkeyPatch) -> Authorization:
    """The refund asked for approval, then the clock moved past the request's expiry."""
    gate, agent = desk
    asked = gate.authorize(agent, REFUND, call_id="c1")
    assert asked.needs_approval and asked.request is not None
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 61)
    return asked


def test_an_expired_request_is_declined_once_and_closed(
    desk: tuple[Gate, AgentIdentity], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = desk[0]
    asked = _asked_then_expired(desk, monkeypatch)
    assert asked.request is not None

    declined = gate.decline(asked, "nobody answered")

    assert declined.verdict == "deny" and declined.audit_index is not None
    entry = gate.audit.entry(declined.audit_index)
    assert entry.kind == "deny" and entry.ref == asked.audit_index
    record = gate.approvals.get(asked.request["id"])
    assert (record.state, record.approver) == ("denied", "agentgate:declined")


def test_an_expired_request_declined_is_not_declined_again(
    desk: tuple[Gate, AgentIdentity], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = desk[0]
    asked = _asked_then_expired(desk, monkeypatch)
    gate.decline(asked, "nobody answered")
    gate.flush()
    size = gate.audit.size()

    with pytest.raises(InputError, match=r"cannot be declined: .* is denied"):
        gate.decline(asked, "a retry of the same decline")

    gate.flush()
    assert gate.audit.size() == size
    assert gate.verify().ok
