"""At the gateway too, revocation is read in an approval vote's own transaction (review R60).

``GatewayGate.authorize_invocation`` decides a call behind an approval gate (the nonce used,
revocation read), then, under a quorum above one, records the approval it carries as one
approver's vote in a transaction of its own. Revocation was not read again in that transaction,
so a revocation committed between the two (by another process, into the shared store) had the
vote recorded on a request without grant rows (asked by an older release, still open after an
upgrade), and a request with them answered 403 ``approval_required`` with the approval not
counted, where the call is revoked. The vote's transaction now reads revocation
(``_approval_complete``'s ``refusal``, as ``Gate.authorize`` asks its authority there): no vote is
recorded and the call is refused 401 ``revoked``.

The interleaving is made deterministic: the revocation is written through a second connection
just as the vote's transaction is about to open (wrapping ``_decision_transaction``), i.e. after
the decision and before the vote.

Real components: a GatewayGate over a SQLite store, and a second connection to it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened

from agentgate.authority import GrantRepository, revoke
from agentgate.dispatch.gateway import GatewayDecision, GatewayGate, invocation_headers
from agentgate.dispatch.gateway._client import INVOCATION_HEADER, chat_call
from agentgate.gate import AgentIdentity, Approval
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Transaction

MODEL = "qwen3-32b"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200}


def _policy(keys: dict[str, SigningKey], quorum: int = 2) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  agent: {{kind: agent, did: "{keys["agent"].did}", roles: [chat]}}
  lead: {{kind: human, did: "{keys["lead"].did}", roles: []}}
  lead2: {{kind: human, did: "{keys["lead2"].did}", roles: []}}
models:
  {MODEL}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities: [{{resource: "model:{MODEL}"}}]
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
approvals:
  long-answers:
    resource: model:{MODEL}
    approvers: [lead, lead2]
    quorum: {quorum}
"""


def revoke_as_the_next_transaction_opens(
    gate: GatewayGate, path: Path, grant_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revoke ``grant_id`` in the store at ``path`` through another connection, as another process
    would, once, just before ``gate``'s next decision transaction opens."""
    opened = gate._decision_transaction
    armed = [True]

    def opening() -> AbstractContextManager[Transaction]:
        if armed:
            armed.clear()
            other = SQLiteStore(path)
            try:
                repo = GrantRepository(other)
                revoke(repo, grant_id, reason="revoked by another process")
                repo.close()
            finally:
                other.close()
        return opened()

    monkeypatch.setattr(gate, "_decision_transaction", opening)


@dataclass
class Asked:
    path: Path
    gate: GatewayGate
    keys: dict[str, SigningKey]
    agent: AgentIdentity
    request: dict[str, Any]

    def send(self, approval: Approval | None = None) -> GatewayDecision:
        """The call, freshly signed, with ``approval`` in its approval header."""
        signed = invocation_headers(self.agent.key, self.agent.chain, BODY)[INVOCATION_HEADER]
        text = None if approval is None else json.dumps(approval.to_dict())
        return self.gate.authorize_invocation(
            self.agent.chain.token, signed, chat_call(BODY), (10, 200), text
        )

    def revoke_as_the_vote_opens(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Revoke the agent's grant through another connection, as another process would, once,
        just before the next decision transaction (the vote's) opens."""
        revoke_as_the_next_transaction_opens(self.gate, self.path, self.agent.grant_id, monkeypatch)

    def vote(self) -> tuple[GatewayDecision, list[str]]:
        """lead's vote sent with the call: the decision, and the kinds of the call's entries."""
        answer = self.send(Approval.sign(self.request, self.keys["lead"]))
        self.gate.flush()
        kinds = [e.kind for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]
        return answer, kinds


@pytest.fixture
def asked(tmp_path: Path) -> Iterator[Asked]:
    """The agent's call asked for approval (quorum 2) through the gateway's gate."""
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead", "lead2")}
    path = tmp_path / "s.db"
    gate = GatewayGate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(path))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        first = Asked(path, gate, keys, agent, {})
        answer = first.send()
        assert (answer.status, answer.code) == (403, "approval_required")
        first.request = answer.auth.approval_payload()
        yield first
    finally:
        gate.close()


def _as_asked_before_grant_rows(asked: Asked) -> None:
    """The request as an older release left it: no grant rows (``approval_grants``)."""
    with opened(asked.path) as db:
        db.execute("DELETE FROM approval_grants WHERE approval_id = ?", (asked.request["request"]["id"],))


@pytest.mark.parametrize("grant_rows", [False, True], ids=["asked_before_grant_rows", "with_grant_rows"])
def test_a_revocation_before_the_vote_records_no_vote_and_the_call_is_refused_revoked(
    asked: Asked, monkeypatch: pytest.MonkeyPatch, grant_rows: bool
) -> None:
    """Review R60: the gateway read revocation before the vote's transaction; a revocation between them had the vote recorded."""
    if not grant_rows:
        _as_asked_before_grant_rows(asked)
    asked.revoke_as_the_vote_opens(monkeypatch)
    answer, kinds = asked.vote()
    assert asked.gate.approvals.votes(asked.request["request"]["id"])[0] == ()
    assert kinds == ["approval_required", "deny"]
    assert (answer.status, answer.code) == (401, "revoked")
    assert [f.code for f in answer.auth.findings] == ["revoked"]


def test_a_vote_on_a_live_chain_is_still_recorded(asked: Asked) -> None:
    answer, kinds = asked.vote()
    assert (answer.status, answer.code) == (403, "approval_required")
    assert kinds == ["approval_required", "approval_given"]
    second = asked.send(Approval.sign(asked.request, asked.keys["lead2"]))
    assert second.allowed
