"""At the gateway, an approval request is never opened on a revoked chain (review R61).

``GatewayGate.authorize_invocation`` decides a call behind an approval gate (the nonce used,
revocation read), then opens its approval request (or finds the one open) in a transaction of its
own. Revocation was not read again in that transaction, so a revocation committed between the two
(by another process, into the shared store) had a request opened and an ``approval_required``
entry written for a revoked chain, and the caller told 403 ``approval_required``: a person would
be asked to approve a call that can never run. The opening's transaction now reads revocation,
and the call is refused 401 ``revoked`` instead, nothing opened.

The interleaving is made deterministic: the revocation is written through a second connection
just as the opening's transaction is about to open (wrapping ``_decision_transaction``), i.e.
after the decision and before the request.

Real components: a GatewayGate over a SQLite store, and a second connection to it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _raw_sqlite import opened
from test_gateway_r60_vote_in_transaction import BODY, _policy, revoke_as_the_next_transaction_opens

from agentgate.dispatch.gateway import GatewayDecision, GatewayGate, invocation_headers
from agentgate.dispatch.gateway._client import INVOCATION_HEADER, chat_call
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@dataclass
class Caller:
    path: Path
    gate: GatewayGate
    agent: AgentIdentity

    def send(self) -> GatewayDecision:
        """The call, freshly signed, without an approval."""
        signed = invocation_headers(self.agent.key, self.agent.chain, BODY)[INVOCATION_HEADER]
        return self.gate.authorize_invocation(self.agent.chain.token, signed, chat_call(BODY), (10, 200))

    def revoke_as_the_next_transaction_opens(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Revoke the agent's grant through another connection, as another process would, once,
        just before the next decision transaction opens (after the call's decision)."""
        revoke_as_the_next_transaction_opens(self.gate, self.path, self.agent.grant_id, monkeypatch)

    def kinds(self) -> list[str]:
        """The kinds of the call's audit entries, oldest first."""
        self.gate.flush()
        return [e.kind for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]

    def requests(self) -> list[tuple[str, str]]:
        """Every approval request in the store: (state, approver)."""
        with opened(self.path) as db:
            rows = db.execute(
                "SELECT state, coalesce(approver, '') FROM approvals ORDER BY created"
            ).fetchall()
        return [(str(state), str(approver)) for state, approver in rows]


@pytest.fixture(params=[1, 2], ids=["quorum_1", "quorum_2"])
def caller(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Caller]:
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead", "lead2")}
    path = tmp_path / "s.db"
    gate = GatewayGate(parse_policy(_policy(keys, request.param), source="p.yaml"), SQLiteStore(path))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        yield Caller(path, gate, agent)
    finally:
        gate.close()


def test_a_revocation_before_the_request_opens_refuses_the_call_revoked_and_opens_nothing(
    caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R61: a revocation between the decision and the opening of the approval request
    had a request opened (and ``approval_required`` answered) on a revoked chain; now the call
    is refused 401 ``revoked`` in the opening's transaction, and no request exists."""
    caller.revoke_as_the_next_transaction_opens(monkeypatch)
    answer = caller.send()
    assert (answer.status, answer.code) == (401, "revoked")
    assert [f.code for f in answer.auth.findings] == ["revoked"]
    assert caller.kinds() == ["deny"]
    assert caller.requests() == []


def test_a_revocation_before_a_request_is_asked_again_closes_it_and_refuses_revoked(
    caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R61: the same race on a call whose request is open already: the call is refused
    401 ``revoked`` (not handed the open request again, nor a new one), and the request it stood
    on is closed as denied by the revocation, the refusal referring to its entry."""
    first = caller.send()
    assert (first.status, first.code) == (403, "approval_required")
    caller.revoke_as_the_next_transaction_opens(monkeypatch)
    answer = caller.send()
    assert (answer.status, answer.code) == (401, "revoked")
    assert caller.kinds() == ["approval_required", "deny"]
    assert caller.requests() == [("denied", "agentgate:revoked")]
    deny = [e for e in caller.gate.audit.entries() if e.kind == "deny"][-1]
    assert deny.ref == first.auth.audit_index


def test_a_call_on_a_live_chain_still_has_its_request_opened(caller: Caller) -> None:
    """Review R61: the re-read of revocation refuses nothing on a live chain."""
    answer = caller.send()
    assert (answer.status, answer.code) == (403, "approval_required")
    assert caller.kinds() == ["approval_required"]
    assert caller.requests() == [("pending", "")]
