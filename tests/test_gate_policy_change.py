"""A new version of the policy deployed over the same store while
grants, approval requests, budgets and quota windows made under the old one are live.

What holds (docs/policy-reference.md, "Changing a policy"): every decision reads the policy the
process runs now (rules, constraints, principals, trust anchors, approval gates, quota limits,
the TTL, budget and delegation rules a chain is held to: a root grant that carries more than
its role's budget now is refused, since review R58). What did not
(fixed since):

- ``Gate.delegate`` skips the policy's delegation rule for a parent the policy no longer names (a
  principal removed, or its key replaced): the grant is recorded with an ``allow`` entry (fix in
  ``agentgate/gate/``);
- ``Gate.issue`` signs and records a root grant from a key that is not a trust anchor of its
  policy (the anchor rotated away), which ``agentgate grant issue --policy`` refuses (fix in
  ``agentgate/gate/``);
- an approval request kept the quorum of the policy it was asked under, while the Gate counted to
  the new policy's quorum; a vote given by an approver the new policy no longer names still
  counted; quota usage was stored by quota name and window only, so a quota whose unit changed
  read the old unit's count. Fixed in review r38 (``store.approvals.QuorumRule``,
  ``store.quotas.quota_key``), with the tests at the end of this file.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.authority import Invocation
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import GatewayGate
from agentgate.errors import AgentGateError, ScopeCreep
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

KEYS = {
    n: SigningKey.generate() for n in ("root", "root2", "agent", "agent2", "alice", "bob", "carol", "sub")
}

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{anchor}"}}
tenants:
  acme: {{}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker], tenant: acme}}
  alice: {{kind: human, did: "{alice}", roles: [lead]}}
  bob: {{kind: human, did: "{bob}", roles: [lead]}}
  carol: {{kind: human, did: "{carol}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
        constraints: {{amount: {{le: {refund_max}}}}}
      - resource: model:small
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: {ttl}
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:lookup
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
quotas:
  acme-usage:
    tenant: acme
    window_s: {quota_window_s}
    limit: {quota_limit}
    unit: {quota_unit}
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: {approvers}
    quorum: {quorum}
"""

OLD = {
    "anchor": KEYS["root"].did,
    "agent": KEYS["agent"].did,
    "refund_max": 1000,
    "budget": 10_000,
    "ttl": 600,
    "quota_limit": 1_000_000,
    "quota_unit": "calls",
    "approvers": "[alice, bob, carol]",
    "quorum": 1,
    # The longest window (10 years): windows are aligned to the epoch, and an hour's could roll
    # over between the calls a test counts and the one that must be refused.
    "quota_window_s": 315_360_000,
}
REFUND = Call.tool("refund", {"amount": 500})
LOOKUP = Call.tool("lookup", {"id": "1"})
MODEL = Call.model("small", {"max_tokens": 10})


def policy_text(**changes: object) -> str:
    fields = {**OLD, **changes}
    names = {n: KEYS[n].did for n in ("alice", "bob", "carol")}
    return POLICY.format(**fields, **names)


def restart(path: Path, cls: type[Gate] = Gate, **changes: object) -> Gate:
    """A process started on the store at ``path`` with the policy changed by ``changes``."""
    return cls(parse_policy(policy_text(**changes), source="new.yaml"), SQLiteStore(path / "ag.db"))


def issued_under_old(path: Path, **changes: object) -> tuple[AgentIdentity, AgentIdentity]:
    """The agent's root grant and a sub-agent's grant, made by a process on the old policy."""
    old = restart(path, **changes)
    try:
        agent = old.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        sub = old.delegate(
            agent, name="sub", key=KEYS["sub"], capabilities=["tool:lookup"], ttl=timedelta(seconds=60)
        )
    finally:
        old.close()
    return agent, sub


def asked_under_old(path: Path, **changes: object) -> tuple[AgentIdentity, Authorization, Gate]:
    """The agent's grant and its refund call's approval request, asked by a process on the old
    policy (changed by ``changes``); that process, still open."""
    old = restart(path, **changes)
    agent = old.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    asked = old.authorize(agent, REFUND, call_id="c1")
    assert asked.needs_approval and asked.request is not None
    return agent, asked, old


def approve(gate: Gate, agent: AgentIdentity, asked: Authorization, who: str) -> Authorization:
    assert asked.request is not None
    return gate.authorize(agent, REFUND, call_id="c1", approval=Approval.sign(asked.request, KEYS[who]))


def gateway_status(gate: GatewayGate, identity: AgentIdentity, call: Call = MODEL) -> tuple[int, str | None]:
    invocation = Invocation.sign(KEYS[identity.name], identity.chain, call).encode()
    answer = gate.authorize_invocation(identity.chain.token, invocation, call, (1, 1))
    return answer.status, answer.code


# --- what holds ------------------------------------------------------------------------------


def test_a_narrowed_rule_applies_at_once_to_grants_issued_under_the_old_one(tmp_path: Path) -> None:
    agent, sub = issued_under_old(tmp_path)
    new = restart(tmp_path, refund_max=10)
    try:
        refused = new.authorize(agent, Call.tool("refund", {"amount": 50}))
        assert not refused.allowed and "amount=50 does not satisfy amount <= 10" in refused.reasons[0]
    finally:
        new.close()
    # The rule's capability gone: the root grant and the sub-agent's, which narrows it, both refused.
    text = policy_text().replace(
        "      - resource: tool:lookup\n      - resource: tool:refund", "      - resource: tool:refund"
    )
    assert text != policy_text()
    new = Gate(parse_policy(text, source="new.yaml"), SQLiteStore(tmp_path / "ag.db"))
    try:
        for identity in (agent, sub):
            refused = new.authorize(identity, LOOKUP)
            assert not refused.allowed
            assert refused.reasons == ("no rule of agent's roles (worker) names tool:lookup",)
    finally:
        new.close()


def test_a_lowered_budget_refuses_the_live_grants_that_carry_more(tmp_path: Path) -> None:
    """Review R58: a root grant is held to its role's budget at each decision, as to its TTL, so a
    grant issued under a larger ``budget.limit`` is refused (``root_budget_above_policy``) with its
    sub-agents; until then it kept the budget it was signed with, and spent past the new limit."""
    agent, sub = issued_under_old(tmp_path)
    new = restart(tmp_path, budget=1)
    try:
        assert agent.chain.tip.budget is not None and agent.chain.tip.budget.amount == 10_000
        # Each asks a call its grant covers: one it does not is refused call_not_covered first,
        # as the gateway answers (review R59).
        for identity, call in ((agent, MODEL), (sub, LOOKUP)):
            refused = new.authorize(identity, call, tokens=(100, 10) if call is MODEL else None)
            assert [(f.kind, f.code) for f in refused.findings] == [
                ("scope_creep", "root_budget_above_policy")
            ]
            assert refused.reservations == ()
        fresh = new.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        assert fresh.chain.tip.budget is not None and fresh.chain.tip.budget.amount == 1
        assert new.authorize(fresh, LOOKUP).allowed
    finally:
        new.close()


def test_a_lowered_ttl_refuses_the_live_grants_that_outlive_it(tmp_path: Path) -> None:
    """Review R57: a root grant is held to the policy's TTL at each decision, so a grant issued
    under a longer ``ttl_s`` is refused (``root_ttl_above_policy``) with its sub-agents; until
    then it kept the expiry it was signed with (and so did one issued outside the Gate)."""
    agent, sub = issued_under_old(tmp_path)
    new = restart(tmp_path, ttl=1)
    try:
        assert agent.chain.tip.expires - time.time() > 500
        for identity in (agent, sub):
            refused = new.authorize(identity, LOOKUP)
            assert [(f.kind, f.code) for f in refused.findings] == [
                ("non_revocable_grant", "root_ttl_above_policy")
            ]
        fresh = new.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        assert fresh.chain.tip.expires - time.time() <= 1
    finally:
        new.close()


def test_a_rotated_trust_anchor_refuses_every_chain_of_the_old_one(tmp_path: Path) -> None:
    agent, sub = issued_under_old(tmp_path)
    new = restart(tmp_path, GatewayGate, anchor=KEYS["root2"].did)
    assert isinstance(new, GatewayGate)
    try:
        for identity in (agent, sub):
            refused = new.authorize(identity, LOOKUP)
            assert [(f.kind, f.code) for f in refused.findings] == [
                ("authority_chain_opacity", "untrusted_root")
            ]
        assert gateway_status(new, agent) == (401, "untrusted_root")
    finally:
        new.close()


def test_a_principal_whose_key_was_replaced_is_refused_with_its_sub_agents(tmp_path: Path) -> None:
    agent, sub = issued_under_old(tmp_path)
    new = restart(tmp_path, GatewayGate, agent=KEYS["agent2"].did)
    assert isinstance(new, GatewayGate)
    try:
        for identity in (agent, sub):
            refused = new.authorize(identity, LOOKUP)
            assert refused.reasons == (f"{KEYS['agent'].did!r} is not a principal of this policy",)
        assert gateway_status(new, agent) == (403, "policy_denied")
    finally:
        new.close()


def test_a_quota_lowered_below_its_count_refuses_the_rest_of_the_window(tmp_path: Path) -> None:
    agent, _ = issued_under_old(tmp_path)
    old = restart(tmp_path)
    try:
        for _ in range(3):
            assert old.authorize(agent, LOOKUP).allowed
    finally:
        old.close()
    new = restart(tmp_path, quota_limit=2)
    try:
        refused = new.authorize(agent, LOOKUP)
        assert refused.quota_exceeded == "acme-usage"
    finally:
        new.close()


def test_an_approval_gate_removed_while_a_request_waits_lets_the_call_run(tmp_path: Path) -> None:
    agent, _, old = asked_under_old(tmp_path)
    old.close()
    text = policy_text().replace("when: {amount: {gt: 100}}", "when: {amount: {gt: 100000}}")
    assert text != policy_text()
    new = Gate(parse_policy(text, source="new.yaml"), SQLiteStore(tmp_path / "ag.db"))
    try:
        assert new.authorize(agent, REFUND, call_id="c1").allowed
    finally:
        new.close()


# --- what does not ---------------------------------------------------------------------------


@pytest.mark.parametrize("change", [{"removed": True}, {"agent": KEYS["agent2"].did}])
def test_a_principal_the_new_policy_no_longer_names_cannot_delegate(
    tmp_path: Path, change: dict[str, object]
) -> None:
    agent, _ = issued_under_old(tmp_path)
    if change.get("removed"):
        text = policy_text().replace(
            f'  agent: {{kind: agent, did: "{KEYS["agent"].did}", roles: [worker], tenant: acme}}\n', ""
        )
        assert text != policy_text()
        new = Gate(parse_policy(text, source="new.yaml"), SQLiteStore(tmp_path / "ag.db"))
    else:
        new = restart(tmp_path, **change)
    try:
        before = new.audit.size()
        with pytest.raises(ScopeCreep):
            new.delegate(
                agent,
                name="sub2",
                key=SigningKey.generate(),
                capabilities=["tool:lookup"],
                ttl=timedelta(seconds=60),
            )
        new.flush()
        assert [e.kind for e in list(new.audit.entries())[before:]] == ["deny"]
    finally:
        new.close()


def test_a_key_that_is_no_longer_a_trust_anchor_cannot_issue(tmp_path: Path) -> None:
    new = restart(tmp_path, anchor=KEYS["root2"].did)
    try:
        with pytest.raises(AgentGateError):
            new.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        new.flush()
        assert not [e for e in new.audit.entries() if e.kind == "allow"]
    finally:
        new.close()


def test_a_lowered_quorum_lets_one_approver_approve_a_request_asked_before(tmp_path: Path) -> None:
    agent, asked, old = asked_under_old(tmp_path, quorum=2)
    old.close()
    new = restart(tmp_path, quorum=1)
    try:
        assert approve(new, agent, asked, "alice").allowed
    finally:
        new.close()


def test_a_raised_quorum_is_reached_by_a_second_approver_of_a_request_asked_before(tmp_path: Path) -> None:
    agent, asked, old = asked_under_old(tmp_path, quorum=1)
    old.close()
    new = restart(tmp_path, quorum=2)
    try:
        assert approve(new, agent, asked, "alice").needs_approval  # one of two: not yet
        assert approve(new, agent, asked, "bob").allowed
    finally:
        new.close()


def test_a_vote_of_an_approver_the_new_policy_removed_does_not_count(tmp_path: Path) -> None:
    agent, asked, old = asked_under_old(tmp_path, quorum=2)
    try:
        assert approve(old, agent, asked, "alice").needs_approval  # her vote, one of two
    finally:
        old.close()
    new = restart(tmp_path, quorum=2, approvers="[bob, carol]")
    try:
        assert approve(new, agent, asked, "bob").needs_approval  # bob's is the only valid vote
        assert approve(new, agent, asked, "carol").allowed
    finally:
        new.close()


def test_a_quota_whose_unit_changed_does_not_read_the_old_units_count(tmp_path: Path) -> None:
    agent, _ = issued_under_old(tmp_path)
    old = restart(tmp_path, quota_unit="tokens")
    try:
        assert old.authorize(agent, MODEL, tokens=(1000, 10)).allowed  # 1,010 tokens counted
    finally:
        old.close()
    new = restart(tmp_path, quota_unit="calls", quota_limit=100)
    try:
        assert new.authorize(agent, LOOKUP).allowed  # the first call of this window
    finally:
        new.close()


# --- review r38: the quorum and the approvers are the policy's now ----------------------------


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_a_lowered_quorum_is_met_by_a_vote_given_before_the_change(tmp_path: Path, who: str) -> None:
    """Alice's vote, one of two under the old policy, is enough under the new one: the next
    approval presented, hers again or another approver's, lets the call run (it is not refused as
    a vote on a request already approved)."""
    agent, asked, old = asked_under_old(tmp_path, quorum=2)
    try:
        assert approve(old, agent, asked, "alice").needs_approval
    finally:
        old.close()
    new = restart(tmp_path, quorum=1)
    try:
        ran = approve(new, agent, asked, who)
        assert ran.allowed, ran.reasons
        assert asked.request is not None
        assert new.approvals.get(asked.request["id"]).state == "consumed"
    finally:
        new.close()


def test_the_approvers_recorded_with_the_allow_are_those_the_policy_counts(tmp_path: Path) -> None:
    agent, asked, old = asked_under_old(tmp_path, quorum=2)
    try:
        assert approve(old, agent, asked, "alice").needs_approval
    finally:
        old.close()
    new = restart(tmp_path, quorum=2, approvers="[bob, carol]")
    try:
        assert approve(new, agent, asked, "bob").needs_approval
        ran = approve(new, agent, asked, "carol")
        assert ran.allowed
        assert ran.approver == ",".join(sorted((KEYS["bob"].did, KEYS["carol"].did)))
    finally:
        new.close()


def test_approval_list_shows_the_quorum_the_request_was_last_counted_against(tmp_path: Path) -> None:
    agent, asked, old = asked_under_old(tmp_path, quorum=1)
    old.close()
    new = restart(tmp_path, quorum=3)
    try:
        assert approve(new, agent, asked, "alice").needs_approval
        [record] = new.approvals.open_records()
        votes = new.approvals.votes(record.id)[0]
        assert record.quorum == 3 and votes == (KEYS["alice"].did,)
    finally:
        new.close()


def test_a_window_counted_before_quotas_were_keyed_by_unit_is_carried_over(tmp_path: Path) -> None:
    """A store upgraded from a release that keyed usage by the quota's name only: the current
    window's count is carried into the new key once, so the upgrade does not reopen a full window."""
    from agentgate.store.quotas import window_start

    agent, _ = issued_under_old(tmp_path)
    store = SQLiteStore(tmp_path / "ag.db")
    try:
        with store.transaction() as tx:
            tx.execute(
                "INSERT INTO quota_usage (quota, window_start, used) VALUES (?, ?, ?)",
                ("acme-usage", window_start(OLD["quota_window_s"], time.time()), 2),
            )
    finally:
        store.close()
    new = restart(tmp_path, quota_limit=3)
    try:
        assert new.authorize(agent, LOOKUP).allowed  # the third of three
        assert new.authorize(agent, LOOKUP).quota_exceeded == "acme-usage"
    finally:
        new.close()


@pytest.mark.parametrize("change", [{"quota_unit": "tokens"}, {"quota_limit": 1}])
def test_only_a_change_of_what_a_quota_counts_restarts_its_count(
    tmp_path: Path, change: dict[str, object]
) -> None:
    agent, _ = issued_under_old(tmp_path)
    old = restart(tmp_path, quota_limit=5)
    try:
        assert old.authorize(agent, LOOKUP).allowed
    finally:
        old.close()
    new = restart(tmp_path, **change)
    try:
        if "quota_unit" in change:  # tokens now: the call counted under calls is not read as a token
            assert new.authorize(agent, MODEL, tokens=(0, 1)).allowed
        else:  # the same quota with a lower limit: its one call fills it
            assert new.authorize(agent, LOOKUP).quota_exceeded == "acme-usage"
    finally:
        new.close()
