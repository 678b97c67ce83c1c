"""Review R61: an approval used by an allow whose call did not run (its process died after the
allow), presented again when the framework call is decided again. It never counts again; the call
is asked for again where it may run again (settled as not run, or an idempotent tool asked again
in the framework call the approval was given in), and refused as before everywhere else. Decided
through ``Gate.authorize`` as the LangGraph middleware calls it (a call id, a run scope and the
framework call it was asked in), on a real SQLite store and a real PostgreSQL one; the crash itself, a real ``SIGKILL`` of a
LangGraph run, is tests/test_langgraph_r61_crash_approval.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.once import settle

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  alice: {{kind: human, did: "{alice}"}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  pay:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: tool:pay}}]
    budget: {{limit: 1000000, unit: calls}}
    ttl_s: 600
approvals:
  lookup:
    resource: tool:lookup
    approvers: [alice]
    expiry_s: 600
  pay:
    resource: tool:pay
    approvers: [alice]
    expiry_s: 600
"""

LOOKUP = Call.tool("lookup", {"id": "7"})
PAY = Call.tool("pay", {"amount": 5})
ASKED_IN = ("thread-1|task-1", "answer-1")
"""The framework call's run scope and the version of the answer that asked for it."""


@dataclass
class Rig:
    gate: Gate
    agent: AgentIdentity
    alice: SigningKey

    def decide(
        self, call: Call, approval: Approval | None = None, *, framework: bool = True
    ) -> Authorization:
        """The call decided as the LangGraph middleware decides it (``framework``), else as a
        caller without a run (the gateway, the Gate's own API) decides it: no framework call."""
        return self.gate.authorize(
            self.agent,
            call,
            call_id="c1",
            run_id="thread-1|task-1",
            asked_in=ASKED_IN if framework else None,
            approval=approval,
        )

    def approved(self, asked: Authorization) -> Approval:
        assert asked.needs_approval
        return Approval.sign(asked.approval_payload(), self.alice)

    def allowed_and_killed(self, call: Call, *, framework: bool = True) -> Approval:
        """The call approved and allowed, and its process killed before the call ran (nothing of
        its outcome recorded); the approval its allow used."""
        approval = self.approved(self.decide(call, framework=framework))
        assert self.decide(call, approval, framework=framework).allowed
        return approval


@pytest.fixture
def rig(store: Store) -> Iterator[Rig]:
    """The Gate on each store (SQLite, and PostgreSQL through the fixtures' server)."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    text = POLICY.format(root=keys["root"].did, agent=keys["agent"].did, alice=keys["alice"].did)
    with Gate(parse_policy(text, source="r61b.yaml"), store) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        yield Rig(gate, agent, keys["alice"])


def _asked_again(rig: Rig, again: Authorization, used: Approval) -> None:
    """``again`` asks for a new approval, not the used one's request, and says why; the log has
    an ``approval_required`` entry saying so."""
    assert again.needs_approval and again.request is not None
    assert again.request["id"] != used.request
    why = [r for r in again.reasons if f"approval of request {used.request} not used" in r]
    assert why and "does not count again" in why[0]
    rig.gate.flush()
    said = [e for e in rig.gate.audit.entries() if e.kind == "approval_required" and why[0] in e.reasons]
    assert said


def test_an_idempotent_call_killed_after_its_allow_is_asked_for_again(rig: Rig) -> None:
    """Review R61: an idempotent tool's approved call whose process died after the allow is
    decided again with the approval it used (a resumed run replays it): not refused for good as
    ``already used`` (until review R61), nor allowed on it, but asked for again; the new approval
    runs it."""
    used = rig.allowed_and_killed(LOOKUP)
    again = rig.decide(LOOKUP, used)
    _asked_again(rig, again, used)
    assert not rig.decide(LOOKUP, used).allowed  # replayed again: still not counted
    assert rig.gate.run(rig.decide(LOOKUP, rig.approved(again)), lambda: "found") == "found"


def test_a_once_only_call_settled_as_not_run_is_asked_for_again(rig: Rig) -> None:
    """Review R61: a call that must run once, killed after its allow and settled by hand as not
    run (``agentgate tasks settle KEY --not-run``), is asked for again when decided with the
    approval it used (until review R61: refused as ``already used``, for good); the new approval
    runs it once."""
    used = rig.allowed_and_killed(PAY)
    (record,) = rig.gate.once.unsettled()
    settle(rig.gate.store, rig.gate.audit, record.key, ran=False, by="operator", min_age_s=0)
    again = rig.decide(PAY, used)
    _asked_again(rig, again, used)
    assert rig.gate.run(rig.decide(PAY, rig.approved(again)), lambda: "paid") == "paid"
    assert not rig.decide(PAY, used).allowed  # ran now: refused, never asked again


def test_a_once_only_call_killed_and_not_settled_stays_refused_as_started(rig: Rig) -> None:
    """Review R61: the same call not settled (it may have had its effect) is refused as started
    with its outcome never recorded, with or without its approval; nobody is asked again."""
    used = rig.allowed_and_killed(PAY)
    for approval in (used, None):
        refused = rig.decide(PAY, approval)
        assert not refused.allowed and not refused.needs_approval
        assert "its outcome was never recorded" in refused.explain()
    assert rig.gate.approvals.open_records() == []


def test_a_once_only_call_settled_as_ran_stays_refused(rig: Rig) -> None:
    """Review R61: settled as ran, the call is never run again, and nobody is asked for it."""
    used = rig.allowed_and_killed(PAY)
    (record,) = rig.gate.once.unsettled()
    settle(rig.gate.store, rig.gate.audit, record.key, ran=True, by="operator", min_age_s=0)
    refused = rig.decide(PAY, used)
    assert not refused.allowed and not refused.needs_approval
    assert "already ran to completion" in refused.explain()


def test_a_used_approval_outside_a_framework_call_is_still_refused_as_used(rig: Rig) -> None:
    """Review R61: decided without a framework call (the gateway, the Gate's own API), an
    idempotent tool's used approval presented again is a replay refused as ``already used``, as
    before: nothing tells a resumed run from a caller replaying it, and that caller can ask
    again without it."""
    used = rig.allowed_and_killed(LOOKUP, framework=False)
    refused = rig.decide(LOOKUP, used, framework=False)
    assert not refused.allowed and not refused.needs_approval
    assert "already used" in refused.explain()


def test_an_idempotent_call_that_ran_asks_again_rather_than_run_on_its_used_approval(rig: Rig) -> None:
    """Review R61: an idempotent call that ran to its end, decided again in the same framework
    call with its used approval (a replay), is asked for again, never allowed on it: it may run
    again, but only with an approval given for that."""
    used = rig.approved(rig.decide(LOOKUP))
    assert rig.gate.run(rig.decide(LOOKUP, used), lambda: "found") == "found"
    _asked_again(rig, rig.decide(LOOKUP, used), used)
