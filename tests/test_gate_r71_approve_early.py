"""``Gate.approve`` refuses at once an approval the Gate can tell would never count, where until
review R71 it signed it and the run refused it only once resumed, in the next interrupt's reasons
(real Gate, real SQLite store, the payload of a real LangGraph interrupt)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_gate_r68_delegated_approval import PAY
from test_gate_r68_delegated_approval import _team as _r68_team

from agentgate.errors import InputError
from agentgate.gate import Approval, Gate, approval_call_hash
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {root: {did: "ROOT"}}
principals:
  desk: {kind: agent, did: "DESK", roles: [desk]}
  alice: {kind: human, did: "ALICE", roles: [lead]}
  bob: {kind: human, did: "BOB", roles: [lead]}
tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: number, required: true}}
    loggable: [order_id, amount]
roles:
  desk:
    kind: agent
    capabilities: [{resource: "tool:payments.refund"}]
    ttl_s: 3600
  lead: {kind: human, ttl_s: 3600}
approvals:
  refunds: {resource: "tool:payments.refund", approvers: [APPROVERS]}
"""


@tool("payments.refund")
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in ("root", "desk", "alice", "bob")}


def _policy(keys: dict[str, SigningKey], approvers: str) -> Any:
    text = POLICY.replace("APPROVERS", approvers)
    for name, key in keys.items():
        text = text.replace(f'"{name.upper()}"', key.did)
    return parse_policy(text, source="desk.yaml")


@pytest.fixture
def gate(tmp_path: Path, keys: dict[str, SigningKey]) -> Iterator[Gate]:
    opened = Gate(_policy(keys, "alice"), SQLiteStore(tmp_path / "agentgate.db"))
    yield opened
    opened.close()


def _paused_state(gate: Gate, keys: dict[str, SigningKey]) -> tuple[Any, Any, dict[str, Any], Any]:
    """The desk agent, paused on the approval of one refund, as docs/quickstart.md runs it; the
    state its run returned (with ``__interrupt__``)."""
    asks = AIMessage(
        "", tool_calls=[{"name": "payments.refund", "id": "c1", "args": {"order_id": "O-1", "amount": 800}}]
    )
    agent = create_gated_agent(
        gate,
        name="desk",
        model=ScriptedChatModel(turns=[asks]),
        tools=[refund],
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    identity = gate.issue(keys["root"], name="desk", key=keys["desk"], role="desk")
    config = {"configurable": {"thread_id": "ticket-1"}}
    state = agent.invoke({"messages": [("user", "refund O-1")]}, config, context=identity)
    return agent, identity, config, state


def _paused(gate: Gate, keys: dict[str, SigningKey]) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """The desk agent, paused on the approval of one refund; its interrupt's payload."""
    agent, identity, config, state = _paused_state(gate, keys)
    return agent, identity, config, state["__interrupt__"][0].value


def test_the_requesters_own_key_is_refused_at_once(gate: Gate, keys: dict[str, SigningKey]) -> None:
    """Review R71: ``gate.approve(payload, requester_key)`` returned an approval, refused only once
    the run resumed ("approval not counted: the approver must not be the requester" in the next
    interrupt). It now raises ``InputError`` naming the rule and who may approve; the run still
    waits, and an approver's approval then refunds."""
    agent, identity, config, payload = _paused(gate, keys)
    with pytest.raises(InputError) as refused:
        gate.approve(payload, keys["desk"])
    message = str(refused.value)
    assert "the approver must not be the requester" in message, message
    assert "alice" in message and payload["request"]["id"] in message, message
    state = agent.invoke(Command(resume=gate.approve(payload, keys["alice"])), config, context=identity)
    assert state["messages"][-2].content == "refunded 800.0 on O-1"


def test_a_key_that_is_no_approver_is_refused_at_once(gate: Gate, keys: dict[str, SigningKey]) -> None:
    """Review R71: a key the gate does not list (bob's, a principal of the policy but no approver
    of the refunds gate) got an approval from ``gate.approve`` that the resumed run did not count
    ("its approver is not one of this call's approvers"). Refused now, naming the approvers."""
    _agent, _identity, _config, payload = _paused(gate, keys)
    with pytest.raises(InputError) as refused:
        gate.approve(payload, keys["bob"])
    message = str(refused.value)
    assert "not one of this call's approvers" in message and "alice" in message, message
    assert keys["bob"].did in message, message


def test_the_approvers_are_the_gates_policy_now_not_the_payloads(
    tmp_path: Path, gate: Gate, keys: dict[str, SigningKey]
) -> None:
    """Review R71: the approvers checked are those of the Gate's policy (as when the run resumes),
    not the list the payload shows: on a Gate over the same store whose policy made bob the
    approver in alice's place, alice (listed in the payload) is refused and bob signs; the run
    resumed on that Gate refunds with bob's approval."""
    agent, identity, config, payload = _paused(gate, keys)
    assert payload["request"]["approvers"] == ["alice"]
    gate.close()
    changed = Gate(_policy(keys, "bob"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        with pytest.raises(InputError, match="not one of this call's approvers"):
            changed.approve(payload, keys["alice"])
        approval = changed.approve(payload, keys["bob"])
        resumed = create_gated_agent(
            changed,
            name="desk",
            model=ScriptedChatModel(turns=[]),
            tools=[refund],
            checkpointer=agent.checkpointer,
            gate_models=False,
        )
        state = resumed.invoke(Command(resume=approval), config, context=identity)
        assert state["messages"][-2].content == "refunded 800.0 on O-1"
    finally:
        changed.close()


def test_a_request_the_store_does_not_hold_is_refused(
    tmp_path: Path, gate: Gate, keys: dict[str, SigningKey]
) -> None:
    """Review R71: an approval of a request id the Gate's store has no request of (an id changed
    on its way, or a Gate on another store) was signed, and the run refused the call when it
    resumed. Refused at once, saying so."""
    _agent, _identity, _config, payload = _paused(gate, keys)
    changed = {**payload, "request": {**payload["request"], "id": "0" * 32}}
    with pytest.raises(InputError, match="no approval request"):
        gate.approve(changed, keys["alice"])
    other = Gate(_policy(keys, "alice"), SQLiteStore(tmp_path / "other.db"))
    try:
        with pytest.raises(InputError, match="no approval request"):
            other.approve(payload, keys["alice"])
    finally:
        other.close()


def test_a_request_asked_for_another_call_is_refused(gate: Gate, keys: dict[str, SigningKey]) -> None:
    """Review R71: a payload that shows another call (its arguments' digest changed, its call_hash
    recomputed to match) under the id of the request asked was signed; the store's request is for
    the call asked, so the approval could never count. Refused at once."""
    _agent, _identity, _config, payload = _paused(gate, keys)
    request = dict(payload["request"])
    request["args_digest"] = "sha256:" + "0" * 64
    request["call_hash"] = approval_call_hash(
        *(request[name] for name in ("resource", "action", "args_digest", "grant", "call_id"))
    )
    with pytest.raises(InputError, match="another call"):
        gate.approve({"request": request}, keys["alice"])


def test_a_declined_request_is_refused(gate: Gate, keys: dict[str, SigningKey]) -> None:
    """Review R71: an approval of a request that was declined (the run resumed with a "no") was
    signed, though a closed request never opens again. Refused at once; ``Approval.sign`` (the
    low-level signer) still signs it, as tools and tests need."""
    agent, identity, config, payload = _paused(gate, keys)
    state = agent.invoke(Command(resume="no"), config, context=identity)
    assert "__interrupt__" not in state
    with pytest.raises(InputError, match="declined"):
        gate.approve(payload, keys["alice"])
    assert Approval.sign(payload, keys["alice"]).approver == keys["alice"].did


def test_approval_sign_makes_the_same_bytes_gate_approve_returned(
    gate: Gate, keys: dict[str, SigningKey]
) -> None:
    """Review R71: the tests that need an approval that does not count now make it with
    ``Approval.sign``; for an approval that counts it signs the very bytes ``Gate.approve``
    returns (Ed25519 is deterministic)."""
    _agent, _identity, _config, payload = _paused(gate, keys)
    assert gate.approve(payload, keys["alice"]) == Approval.sign(payload, keys["alice"]).to_dict()


def test_a_holder_above_the_requester_is_refused(tmp_path: Path) -> None:
    """Review R71: lead, an approver of the pay gate, delegated to alpha; the policy leaves lead out
    of the approvers of alpha's call (review R68), yet ``gate.approve(payload, lead's key)``
    signed, and the approval did not count once presented. Refused at once; carol signs, and her
    approval allows the call."""
    team = _r68_team(tmp_path)
    try:
        alpha = team.sub("alpha")
        asked = team.gate.authorize(alpha, PAY, call_id="c1")
        payload = asked.approval_payload()
        with pytest.raises(InputError, match="not one of this call's approvers") as refused:
            team.gate.approve(payload, team.keys["lead"])
        assert "(carol)" in str(refused.value), refused.value
        approval = Approval.parse(team.gate.approve(payload, team.keys["carol"]))
        assert team.gate.authorize(alpha, PAY, call_id="c1", approval=approval).verdict == "allow"
    finally:
        team.gate.close()


def test_a_request_whose_grant_was_revoked_is_refused(tmp_path: Path) -> None:
    """Review R71: a request still pending in the table whose call's grant was revoked (void: no
    approval of it ever counts, a revocation is for good), the revocation written into the store
    by another writer than a Gate, was signed. Refused at once, naming the revoked grant."""
    team = _r68_team(tmp_path)
    try:
        alpha = team.sub("alpha")
        asked = team.gate.authorize(alpha, PAY, call_id="c1")
        assert asked.request is not None
        team.gate.grants.revoke(alpha.grant_id, now=int(time.time()))  # the store, not Gate.revoke
        assert team.gate.approvals.get(asked.request["id"]).state == "pending"
        with pytest.raises(InputError, match="void") as refused:
            team.gate.approve(asked.approval_payload(), team.keys["carol"])
        assert alpha.grant_id in str(refused.value), refused.value
    finally:
        team.gate.close()
