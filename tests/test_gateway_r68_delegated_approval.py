"""Review R68: at the gateway as in ``Gate.authorize``, an approval gate leaves out of its
approvers the holders the caller's grant was delegated by (r68-gate fixed the Gate; the gateway's
``authorize_invocation`` still judged the sub-agent alone, so its delegator could approve it).

Real components: a GatewayGate over a SQLite store, invocations signed with the callers' keys."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_gateway_r60_vote_in_transaction import BODY, MODEL

from agentgate.dispatch.gateway import GatewayDecision, GatewayGate, invocation_headers
from agentgate.dispatch.gateway._client import INVOCATION_HEADER, chat_call
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  lead: {{kind: agent, did: "{lead}", roles: [chat]}}
  alpha: {{kind: agent, did: "{alpha}", roles: [chat]}}
  carol: {{kind: human, did: "{carol}", roles: []}}
models:
  {model}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities: [{{resource: "model:{model}"}}]
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
    delegation: {{max_depth: 1, capabilities: [{{resource: "model:{model}"}}]}}
approvals:
  answers: {{resource: "model:{model}", approvers: [{approvers}], quorum: 1}}
"""


def _send(gate: GatewayGate, caller: AgentIdentity) -> GatewayDecision:
    signed = invocation_headers(caller.key, caller.chain, BODY)[INVOCATION_HEADER]
    return gate.authorize_invocation(caller.chain.token, signed, chat_call(BODY), (10, 200))


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in ("root", "lead", "alpha", "carol")}


def _gateway(tmp_path: Path, keys: dict[str, SigningKey], approvers: str) -> GatewayGate:
    text = POLICY.format(model=MODEL, approvers=approvers, **{n: k.did for n, k in keys.items()})
    return GatewayGate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "g.db"))


@pytest.fixture
def alone(tmp_path: Path, keys: dict[str, SigningKey]) -> Iterator[tuple[GatewayGate, AgentIdentity]]:
    """A gateway whose only approver is ``lead``, and ``alpha``, a sub-agent ``lead`` delegated to."""
    gate = _gateway(tmp_path, keys, "lead")
    try:
        lead = gate.issue(keys["root"], name="lead", key=keys["lead"], role="chat")
        alpha = gate.delegate(
            lead, name="alpha", key=keys["alpha"], capabilities=[f"model:{MODEL}"], ttl=timedelta(minutes=5)
        )
        yield gate, alpha
    finally:
        gate.close()


def test_a_delegators_sub_agent_is_refused_when_no_other_approver_remains(
    alone: tuple[GatewayGate, AgentIdentity],
) -> None:
    """Review R68: ``lead``, the only approver, delegated to ``alpha``; alpha's call was answered
    403 ``approval_required`` with a request ``lead`` could approve (the requester alone was left
    out). No approval can be valid now: the call is refused, saying why."""
    gate, alpha = alone
    answer = _send(gate, alpha)
    assert answer.code != "approval_required", answer
    assert answer.status == 403 and not answer.auth.allowed
    assert any("delegated by (lead)" in reason for reason in answer.auth.reasons), answer.auth.reasons


def test_another_approver_still_lets_the_request_open(tmp_path: Path, keys: dict[str, SigningKey]) -> None:
    """Review R68: with ``carol`` an approver too, alpha's call still opens its request."""
    gate = _gateway(tmp_path, keys, "lead, carol")
    try:
        lead = gate.issue(keys["root"], name="lead", key=keys["lead"], role="chat")
        alpha = gate.delegate(
            lead, name="alpha", key=keys["alpha"], capabilities=[f"model:{MODEL}"], ttl=timedelta(minutes=5)
        )
        answer = _send(gate, alpha)
        assert (answer.status, answer.code) == (403, "approval_required")
    finally:
        gate.close()
