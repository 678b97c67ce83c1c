"""Approvals presented by a hostile or confused caller (review R62, hostile pass).

Each approval that must not let its call run is presented to ``Gate.authorize`` as a caller
would: signed by the requester itself, by a key the approval gate does not list, for the same
tool with other arguments, after its request expired, by two threads (two Gates on one store
file) at once, and again once used by a call decided outside a framework call. The call never
runs, the answer says why, and the audit entry it names says the same. Also the answer to "the
approver's own grant revoked between signing and resume" (docs/concepts.md, Approvals): an
approver's say comes from the policy, not from a grant.

Real components: Gates over one SQLite file, real threads, the tool run through ``Gate.run``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import Policy, parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  alice: {{kind: human, did: "{alice}", roles: [reviewer]}}
  bob: {{kind: human, did: "{bob}"}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  ping:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: tool:ping}}]
    budget: {{limit: 1000000, unit: calls}}
    ttl_s: 600
  reviewer:
    kind: human
    capabilities: [{{resource: tool:lookup}}]
    ttl_s: 600
approvals:
  lookup:
    resource: tool:lookup
    approvers: [{approvers}]
    expiry_s: 600
  ping:
    resource: tool:ping
    approvers: [alice]
    expiry_s: 1
"""

LOOKUP = Call.tool("lookup", {"id": "7"})


def _policy(keys: dict[str, SigningKey], approvers: str = "alice") -> Policy:
    text = POLICY.format(approvers=approvers, **{n: k.did for n, k in keys.items()})
    return parse_policy(text, source="r62-hostile.yaml")


@dataclass
class Desk:
    gate: Gate
    keys: dict[str, SigningKey]
    agent: AgentIdentity
    path: Path
    ran: list[str] = field(default_factory=list)

    def tool(self, tag: str) -> str:
        self.ran.append(tag)
        return tag

    def entry_reasons(self, auth: Authorization, gate: Gate | None = None) -> tuple[str, list[str]]:
        """The kind and reasons of the audit entry ``auth`` names."""
        assert auth.audit_index is not None
        entries = (gate or self.gate).audit.entries()
        (entry,) = [e for e in entries if e.index == auth.audit_index]
        return entry.kind, list(entry.reasons)

    def told(self, auth: Authorization, why: str) -> list[str]:
        """The kinds of the audit entries that say ``why`` about ``auth``'s call: the entry it
        names, or one referring to it (a request asked again records an ``approval_required``
        entry of its own for an approval that does not count, referring to the request's)."""
        assert auth.audit_index is not None
        return [
            e.kind
            for e in self.gate.audit.entries()
            if auth.audit_index in (e.index, e.ref) and any(why in r for r in e.reasons)
        ]


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice", "bob")}
    gate = Gate(_policy(keys), SQLiteStore(tmp_path / "agentgate.db"))
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    made = Desk(gate, keys, agent, tmp_path)
    yield made
    made.gate.close()


def _asked(desk: Desk, call_id: str, call: Call = LOOKUP) -> Authorization:
    asked = desk.gate.authorize(desk.agent, call, call_id=call_id)
    assert asked.needs_approval
    return asked


def _presented(desk: Desk, call_id: str, approval: Approval, call: Call = LOOKUP) -> Authorization:
    """The call decided with ``approval``, and run if it is allowed."""
    auth = desk.gate.authorize(desk.agent, call, call_id=call_id, approval=approval)
    if auth.allowed:
        desk.gate.run(auth, lambda: desk.tool(call_id), call_id=call_id)
    return auth


def _uncounted(desk: Desk, auth: Authorization, why: str) -> None:
    """``auth`` did not let the call run, and both the answer and its audit entry say ``why``."""
    assert not auth.allowed and desk.ran == []
    assert any(why in r for r in auth.reasons), auth.reasons
    assert desk.told(auth, why) in (["approval_required"], ["deny"])


def test_an_approval_the_requester_signed_itself_is_not_counted(desk: Desk) -> None:
    """Review R62: the requester's own signature never approves its call."""
    approval = Approval.sign(_asked(desk, "self").approval_payload(), desk.keys["agent"])
    _uncounted(desk, _presented(desk, "self", approval), "the approver must not be the requester")


def test_an_approval_by_a_key_the_gate_does_not_list_is_not_counted(desk: Desk) -> None:
    """Review R62: bob is a principal of the policy, not an approver of this gate."""
    approval = Approval.sign(_asked(desk, "bob").approval_payload(), desk.keys["bob"])
    _uncounted(desk, _presented(desk, "bob", approval), "not one of this call's approvers")


def test_an_approval_for_the_same_tool_with_other_arguments_is_not_counted(desk: Desk) -> None:
    """Review R62: an approval is bound to the arguments it was given for, not to the tool."""
    approval = Approval.sign(_asked(desk, "args").approval_payload(), desk.keys["alice"])
    other = Call.tool("lookup", {"id": "8"})
    _uncounted(desk, _presented(desk, "args", approval, other), "it was given for another call")


def test_an_approval_presented_as_its_request_expires_is_refused(desk: Desk) -> None:
    """Review R62: presented at most a second past its request's expiry, the approval is refused."""
    ping = Call.tool("ping", {"id": "1"})
    asked = _asked(desk, "late", ping)
    approval = Approval.sign(asked.approval_payload(), desk.keys["alice"])
    expires_at = asked.request["expires_at"] if asked.request else 0
    while time.time() < expires_at:  # expiry_s: 1, so less than a second
        time.sleep(0.01)
    refused = _presented(desk, "late", approval, ping)
    _uncounted(desk, refused, "expired")
    assert refused.verdict == "deny"


def test_two_threads_resuming_with_one_approval_run_the_tool_once(desk: Desk) -> None:
    """Review R62: two Gates on one store file, each in its own thread, present the same
    approval at the same moment: exactly one call runs; the other is refused as already used."""
    approval = Approval.sign(_asked(desk, "race").approval_payload(), desk.keys["alice"])
    other = Gate(desk.gate.policy, SQLiteStore(desk.path / "agentgate.db"))
    barrier = threading.Barrier(2)
    answers: dict[str, Authorization] = {}

    def resume(name: str, gate: Gate) -> None:
        barrier.wait()
        auth = gate.authorize(desk.agent, LOOKUP, call_id="race", approval=approval)
        answers[name] = auth
        if auth.allowed:
            gate.run(auth, lambda: desk.tool(name), call_id="race")

    try:
        threads = [threading.Thread(target=resume, args=a) for a in (("a", desk.gate), ("b", other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(desk.ran) == 1
        (loser,) = [n for n, a in answers.items() if not a.allowed]
        refused = answers[loser]
        assert refused.verdict == "deny" and any("already used" in r for r in refused.reasons)
        kind, reasons = desk.entry_reasons(refused, other if loser == "b" else desk.gate)
        assert kind == "deny" and any("already used" in r for r in reasons)
    finally:
        other.close()


def test_a_direct_call_resumed_with_its_used_approval_is_refused_and_asked_again_without_it(
    desk: Desk,
) -> None:
    """Review R62 (item 2): outside a framework call (no ``asked_in``) nothing tells a resumed
    call from a replay, so an idempotent call presented again with its used approval is refused
    as already used, never run; sent again without it, it opens a new request."""
    approval = Approval.sign(_asked(desk, "used").approval_payload(), desk.keys["alice"])
    assert _presented(desk, "used", approval).allowed and desk.ran == ["used"]
    again = _presented(desk, "used", approval)
    assert again.verdict == "deny" and desk.ran == ["used"]
    assert any("already used" in r for r in again.reasons)
    assert desk.entry_reasons(again)[0] == "deny"
    fresh = desk.gate.authorize(desk.agent, LOOKUP, call_id="used")
    assert fresh.needs_approval and fresh.request and fresh.request["id"] != approval.request


def test_a_direct_call_that_names_its_scope_is_asked_again_with_its_used_approval(desk: Desk) -> None:
    """Review R62 (item 2): a direct caller that names the call's scope (``asked_in``, as the
    LangGraph integration does) at the asking and at the resume is asked again, never run."""
    scope = ("job-42", "v1")
    asked = desk.gate.authorize(desk.agent, LOOKUP, call_id="scoped", asked_in=scope)
    approval = Approval.sign(asked.approval_payload(), desk.keys["alice"])
    allowed = desk.gate.authorize(desk.agent, LOOKUP, call_id="scoped", asked_in=scope, approval=approval)
    desk.gate.run(allowed, lambda: desk.tool("scoped"), call_id="scoped")
    again = desk.gate.authorize(desk.agent, LOOKUP, call_id="scoped", asked_in=scope, approval=approval)
    assert again.needs_approval and desk.ran == ["scoped"]
    assert any("a used approval does not count again" in r for r in again.reasons)
    assert again.request and again.request["id"] != approval.request


def test_an_approvers_revoked_grant_leaves_the_approval_counted_and_leaving_the_policy_does_not(
    desk: Desk,
) -> None:
    """Review R62: an approver's say comes from the policy's approval gate, not from a grant of
    hers, so revoking her grant (even every grant to her key) between signing and resume leaves
    her approval counted; a Gate whose policy no longer lists her refuses it (docs/concepts.md)."""
    alice = desk.gate.issue(desk.keys["root"], name="alice", key=desk.keys["alice"], role="reviewer")
    approval = Approval.sign(_asked(desk, "kept").approval_payload(), desk.keys["alice"])
    desk.gate.revoke_holder(alice.key.public, reason="left the team")
    assert _presented(desk, "kept", approval).allowed and desk.ran == ["kept"]

    approval = Approval.sign(_asked(desk, "gone").approval_payload(), desk.keys["alice"])
    desk.gate.close()
    desk.gate = Gate(_policy(desk.keys, approvers="bob"), SQLiteStore(desk.path / "agentgate.db"))
    refused = _presented(desk, "gone", approval)
    assert not refused.allowed and desk.ran == ["kept"]
    assert any("not one of this call's approvers" in r for r in refused.reasons)
