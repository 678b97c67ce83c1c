"""Review R68: approval gates and delegation. An approval gate is a policy property (grants carry
no approval field), decided at each call from the policy in force, whatever role, name or
capability the caller's grant carries: a sub-agent meets the gate its delegator meets. And the
requester never approves its own call: neither does anyone the caller's grant was delegated by
(a holder above it in its chain), who drives the sub-agent's call as much as its own. Until R68 a
sub-agent named in the policy was judged as itself only, so its delegator, an approver, approved
the call it could not have approved for itself.

Real components: a Gate over a SQLite file, approvals signed with the approvers' keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
  alpha: {{kind: agent, did: "{alpha}", roles: [worker]}}
  carol: {{kind: human, did: "{carol}"}}
tools:
  pay: {{args: {{amount: {{type: integer, required: true}}}}}}
  lookup: {{args: {{id: {{type: string, required: true}}}}}}
roles:
  lead:
    kind: human
    capabilities: [{{resource: tool:pay}}, {{resource: tool:lookup}}]
    ttl_s: 3600
    delegation:
      max_depth: 2
      max_ttl_s: 600
      capabilities: [{{resource: tool:pay, constraints: {{amount: {{lt: 11}}}}}}, {{resource: tool:lookup}}]
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}, {{resource: tool:lookup}}]
    ttl_s: 600
    delegation: {{max_depth: 1, max_ttl_s: 600, capabilities: [{{resource: tool:pay}}]}}
approvals:
  pay: {{resource: tool:pay, approvers: [{approvers}], quorum: {quorum}}}
"""


@dataclasses.dataclass
class Team:
    gate: Gate
    keys: dict[str, SigningKey]
    lead: AgentIdentity

    def sub(
        self, name: str, parent: AgentIdentity | None = None, caps: tuple[str, ...] = ("tool:pay?amount<11",)
    ) -> AgentIdentity:
        key = self.keys.get(name) or SigningKey.generate()
        return self.gate.delegate(
            parent or self.lead, name=name, key=key, capabilities=list(caps), ttl=timedelta(minutes=5)
        )


def _team(tmp_path: Path, approvers: str = "lead, carol", quorum: int = 1) -> Team:
    keys = {n: SigningKey.generate() for n in ("root", "lead", "alpha", "carol")}
    text = POLICY.format(approvers=approvers, quorum=quorum, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "g.db"))
    return Team(gate, keys, gate.issue(keys["root"], name="lead", key=keys["lead"], role="lead"))


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _team(tmp_path)
    yield made
    made.gate.close()


PAY = Call.tool("pay", {"amount": 5})


def _approved_by(team: Team, who: AgentIdentity, approver: str, call_id: str) -> str:
    asked = team.gate.authorize(who, PAY, call_id=call_id)
    assert asked.needs_approval, asked.reasons
    approval = Approval.sign(dict(asked.request or {}), team.keys[approver])
    return team.gate.authorize(who, PAY, call_id=call_id, approval=approval).verdict


@pytest.mark.parametrize("name", ["alpha", "anon"])
def test_a_sub_agent_meets_its_delegators_approval_gate(team: Team, name: str) -> None:
    """Review R68: a sub-agent under another role (alpha, a worker) or a name the policy does not
    know, holding a narrower capability (amount < 11), still needs the approval."""
    sub = team.sub(name)
    asked = team.gate.authorize(sub, PAY, call_id="c1")
    assert asked.needs_approval
    assert _approved_by(team, sub, "carol", "c2") == "allow"


@pytest.mark.parametrize("name", ["alpha", "anon"])
def test_the_delegator_cannot_approve_its_sub_agents_call(team: Team, name: str) -> None:
    """Review R68: lead, an approver, may not approve its own call; through a sub-agent named in
    the policy (alpha) it could: the requester left out was alpha only, and lead's approval
    counted (allow). Now every holder above the caller in its chain is left out, as the
    requester is."""
    sub = team.sub(name)
    asked = team.gate.authorize(sub, PAY, call_id="c1")
    assert "lead" not in (asked.request or {}).get("approvers", ()), asked.request
    assert _approved_by(team, sub, "lead", "c1") != "allow"


def test_a_delegator_two_levels_up_cannot_approve(team: Team) -> None:
    """Review R68: nor can a holder two links above (lead -> alpha -> helper)."""
    alpha = team.sub("alpha", caps=("tool:pay?amount<11", "tool:lookup"))
    helper = team.sub("helper", parent=alpha)
    assert _approved_by(team, helper, "lead", "c1") != "allow"
    assert _approved_by(team, helper, "carol", "c2") == "allow"


def test_no_approver_left_but_delegators_refuses_the_call(tmp_path: Path) -> None:
    """Review R68: where every approver is a holder above the caller, no approval can be valid:
    the call is refused, naming why, as an approver's own call is."""
    made = _team(tmp_path, approvers="lead")
    try:
        sub = made.sub("alpha")
        refused = made.gate.authorize(sub, PAY, call_id="c1")
        assert refused.verdict == "deny"
        assert any("lead" in r and "no approval can be valid" in r for r in refused.reasons), refused.reasons
    finally:
        made.gate.close()


def test_a_grant_delegated_before_the_gate_was_added_meets_it(tmp_path: Path) -> None:
    """Review R68: a grant carries no approval field, so a sub-agent's grant delegated (and
    recorded) under a policy without the gate meets the gate once a Gate on the same store runs
    the policy that adds it, handed on again for the same call or presented as it was."""
    keys = {n: SigningKey.generate() for n in ("root", "lead", "alpha", "carol")}
    dids = {n: k.did for n, k in keys.items()}
    gated = POLICY.format(approvers="carol", quorum=1, **dids)
    ungated = gated[: gated.index("approvals:")]
    sub_key = SigningKey.generate()

    def delegated(gate: Gate, lead: AgentIdentity) -> AgentIdentity:
        return gate.delegate(
            lead,
            name="anon",
            key=sub_key,
            capabilities=["tool:pay?amount<11"],
            ttl=timedelta(minutes=5),
            call="c",
        )

    with Gate(parse_policy(ungated, source="old.yaml"), SQLiteStore(tmp_path / "g.db")) as before:
        lead = before.issue(keys["root"], name="lead", key=keys["lead"], role="lead")
        old = delegated(before, lead)
        assert before.authorize(old, PAY, call_id="c0").verdict == "allow"
    with Gate(parse_policy(gated, source="new.yaml"), SQLiteStore(tmp_path / "g.db")) as after:
        assert after.authorize(old, PAY, call_id="c1").needs_approval
        again = delegated(after, lead)
        assert again.chain == old.chain  # handed on again: the grant recorded before the gate
        assert after.authorize(again, PAY, call_id="c2").needs_approval
