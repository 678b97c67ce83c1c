"""Review R88b: the seal an authorization carries holds a copy of its approval request, not the
caller's dict. Review R88 sealed an authorization waiting for approval as an allow is, but the
seal kept the very ``request`` dict the caller holds, so a change made in it
(``asked.request["id"] = other.request["id"]``) changed the seal too: ``Gate.decline`` accepted
it, closed another call's request as denied, wrote a ``deny`` referring to the first call's
entry and left that request pending; an approved allow changed so ran, its outcome free to open
another call's request again. Both are now refused as any authorization changed after the
decision is, writing nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_gate_r88_decline_sealed import POLICY, REFUND

from agentgate.capabilities import Call
from agentgate.errors import Denied, InputError
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store


@pytest.fixture
def desk(store: Store) -> Iterator[tuple[Gate, AgentIdentity, SigningKey]]:
    """A Gate on R88's ``POLICY``, its agent and the key of its approver."""
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead")}
    with Gate(parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()})), store) as gate:
        yield gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker"), keys["lead"]


def test_a_request_changed_in_place_is_not_declined_and_nothing_is_written(
    desk: tuple[Gate, AgentIdentity, SigningKey],
) -> None:
    gate, agent, _ = desk
    asked = gate.authorize(agent, REFUND, call_id="c1")
    other = gate.authorize(agent, Call.tool("refund", {"amount": 900}), call_id="c2")
    assert asked.request is not None and other.request is not None
    mine, theirs = asked.request["id"], other.request["id"]
    gate.flush()
    size = gate.audit.size()

    asked.request["id"] = theirs  # type: ignore[index]  # the caller's dict, changed in place
    with pytest.raises(InputError, match="not decided by this Gate"):
        gate.decline(asked, "no")

    gate.flush()
    assert gate.audit.size() == size
    assert (gate.approvals.get(mine).state, gate.approvals.get(theirs).state) == ("pending", "pending")


def test_an_approved_allow_whose_request_is_changed_in_place_does_not_run(
    desk: tuple[Gate, AgentIdentity, SigningKey],
) -> None:
    gate, agent, lead = desk
    asked = gate.authorize(agent, REFUND, call_id="c1")
    other = gate.authorize(agent, Call.tool("refund", {"amount": 900}), call_id="c2")
    assert asked.request is not None and other.request is not None
    allowed = gate.authorize(agent, REFUND, call_id="c1", approval=Approval.sign(dict(asked.request), lead))
    assert allowed.allowed and allowed.request is not None
    ran: list[str] = []

    allowed.request["id"] = other.request["id"]  # type: ignore[index]
    with pytest.raises(Denied, match="not decided by this Gate"):
        gate.run(allowed, lambda: ran.append("refunded"), call_id="c1")

    assert ran == []
