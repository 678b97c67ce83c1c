"""The Gate's decisions (agentgate/gate/: authorize in _gate.py; delegate, issue, revoke in
_delegation.py): a policy refusal is final, an allow is sealed to the fields that decided it, a
budget that cannot be metered or a model call without its estimate allows nothing, a refusal
leaves no reservation held, and only trust anchors and the policy's delegation rules hand
authority on; each step audited."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.authority import Budget, issue
from agentgate.capabilities import Call
from agentgate.errors import Denied, Revoked, ScopeCreep
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
  big: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
        constraints: {{amount: {{le: 1000}}}}
      - resource: model:small
      - resource: model:big
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:lookup
        - resource: model:small
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
quotas:
  small-tokens:
    principal: agent
    window_s: 3600
    limit: 1000
    unit: tokens
    resources: [model:big]
"""


class Setup:
    def __init__(self, path: Path, budget: int | None = 10_000) -> None:
        """``budget``: the worker role's, ``None`` for none (then a root grant made outside the
        Gate may carry any budget, or none: review R58 holds it to the role's where there is one)."""
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
        policy = (
            POLICY
            if budget is not None
            else POLICY.replace("    budget: {{limit: {budget}, unit: usd_micros}}\n", "")
        )
        text = policy.format(budget=budget, **{n: k.did for n, k in self.keys.items()})
        self.gate = Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(path / "agentgate.db"))
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


@pytest.fixture
def unbudgeted(tmp_path: Path) -> Iterator[Setup]:
    """A Setup whose worker role has no budget."""
    made = Setup(tmp_path, budget=None)
    yield made
    made.gate.close()


def test_a_policy_refusal_is_final_even_where_the_grant_covers_the_call(setup: Setup) -> None:
    # Kills: authorize without its ``verdict.outcome is Outcome.DENY`` return (the authority
    # engine decides alone). The grant's capability ``tool:lookup`` has no constraint, so it
    # covers an integer ``id``; only the policy's declaration (``id`` is a string) refuses it.
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": 5}))
    assert not auth.allowed
    assert any("must be a string" in r for r in auth.reasons)
    undeclared = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1", "drop": "table"}))
    assert not undeclared.allowed
    with pytest.raises(Denied):
        setup.gate.run(auth, lambda: "ran")


def _approved_refund(setup: Setup) -> Authorization:
    call = Call.tool("refund", {"amount": 500})
    asked = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1")
    assert asked.needs_approval
    approval = Approval.sign(asked.approval_payload(), setup.keys["lead"])
    auth = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1", approval=approval)
    assert auth.allowed and auth.once_key is not None and auth.request is not None
    return auth


@pytest.mark.parametrize(
    "field",
    ["call", "identity", "audit_index", "reservations", "once_key", "output_tokens", "request"],
)
def test_an_allow_changed_in_any_field_its_run_and_outcome_use_is_refused(setup: Setup, field: str) -> None:
    # Kills: _seal leaving out any one of these fields (an allow edited after the decision, by
    # ``dataclasses.replace``, which keeps its one-use token, would run: with no reservation its
    # outcome charges nothing; with no once key the call is never marked run; with another call
    # or identity it runs what was never decided).
    model = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 50))
    refund = _approved_refund(setup)
    other = setup.gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
    changed = {
        "call": (refund, Call.tool("refund", {"amount": 999})),
        "identity": (refund, other),
        "audit_index": (refund, (refund.audit_index or 0) + 1),
        "reservations": (model, ()),
        "once_key": (refund, None),
        "output_tokens": (model, 10**6),
        "request": (refund, None),
    }
    original, value = changed[field]
    assert getattr(original, field) != value  # the precondition: a real change
    tampered = dataclasses.replace(original, **{field: value})
    ran: list[str] = []
    with pytest.raises(Denied, match="not decided by this Gate"):
        setup.gate.run(tampered, lambda: ran.append("tampered"))
    assert ran == []
    setup.gate.run(original, lambda: ran.append("original"))  # the real allow is still unused
    assert ran == ["original"]


def test_a_revoked_parent_does_not_hand_on_again_a_grant_it_delegated_for_the_same_call(setup: Setup) -> None:
    # Kills: delegate without its first ``_refuse_revoked(parent)``. The check in
    # ``_record_grant`` covers a fresh grant only; a delegation for the same ``call`` finds the
    # grant recorded before (``_delegated_before``, which does not read revocation) and hands it
    # on without recording anything: a revoked supervisor would still get its sub-agent back.
    def hand() -> AgentIdentity:
        return setup.gate.delegate(
            setup.agent,
            name="helper",
            key=setup.keys["helper"],
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=60),
            call="thread-1|step-1|call-1",
        )

    first = hand()
    assert hand().chain.id == first.chain.id  # the precondition: the same call is handed on again
    setup.gate.revoke(setup.agent, reason="leaked")
    with pytest.raises(Revoked):
        hand()
    setup.gate.flush()
    last = list(setup.gate.audit.entries())[-1]
    assert last.kind == "deny" and last.resource == "agent:helper"


def test_a_grant_whose_budget_cannot_be_metered_allows_nothing(unbudgeted: Setup) -> None:
    # Kills: _record_allow without ``not by_unit.keys() <= _METERED`` (fail closed: a budget in
    # a unit the Gate never charges would let its grant spend without limit). A role without a
    # budget: under one, such a root grant is refused root_budget_above_policy first (review R58).
    setup = unbudgeted
    chain = issue(
        setup.keys["root"], setup.keys["agent"].did, ["tool:lookup"], ttl=600, budget=Budget(5, "widgets")
    )
    widgets = AgentIdentity("agent", setup.keys["agent"], chain)
    for n in range(3):
        auth = setup.gate.authorize(widgets, Call.tool("lookup", {"id": str(n)}))
        assert not auth.allowed and "cannot be metered" in auth.explain()


def test_a_model_call_on_a_priced_budget_without_its_token_estimate_is_refused(setup: Setup) -> None:
    # Kills: _record_allow without the ``tokens is None`` refusal of a model call on a
    # usd_micros budget (it would reserve nothing, and an outcome that reports no usage is
    # charged what was reserved: nothing).
    auth = setup.gate.authorize(setup.agent, Call.model("small"))
    assert not auth.allowed and "token estimate" in auth.explain()
    assert setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10)).allowed


def test_a_model_call_a_tokens_quota_counts_without_its_token_estimate_is_refused(unbudgeted: Setup) -> None:
    # Kills: _record_allow refusing a model call without ``tokens`` for a budget only. A call
    # decided without its estimate costs no tokens and no money (``_cost``), so the tokens quota
    # small-tokens on model:big counted nothing for it: a grant with no budget of its own (or a
    # calls budget) made model:big calls without limit past the quota's 1,000 tokens per hour.
    # A role without a budget, under which a root grant without one is within the policy (R58).
    setup = unbudgeted
    chain = issue(setup.keys["root"], setup.keys["agent"].did, ["model:big", "model:small"], ttl=600)
    unbudgeted = AgentIdentity("agent", setup.keys["agent"], chain)
    for _ in range(3):
        auth = setup.gate.authorize(unbudgeted, Call.model("big", {"max_tokens": 5000}))
        assert not auth.allowed and "small-tokens" in auth.explain() and "token estimate" in auth.explain()
        assert auth.audit_index is not None  # the refusal is recorded
    # No quota in tokens counts model:small: a call without its estimate there is decided as before.
    assert setup.gate.authorize(unbudgeted, Call.model("small")).allowed
    assert setup.gate.authorize(unbudgeted, Call.model("big"), tokens=(100, 100)).allowed


def test_a_quota_refusal_rolls_back_the_budget_reserved_before_it(setup: Setup) -> None:
    # Kills: _record_allow without ``ROLLBACK TO SAVEPOINT`` on a refusal. The reservation is
    # written before the quota refuses (1,500 tokens, over the quota's 1,000): left in place, it
    # would hold 2,000 of the budget for ever for a call that never ran.
    auth = setup.gate.authorize(setup.agent, Call.model("big"), tokens=(1000, 500))
    assert not auth.allowed and auth.quota_exceeded == "small-tokens"
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)


def test_a_refusal_by_a_sub_agents_own_budget_leaves_its_parents_budget_untouched(setup: Setup) -> None:
    # Kills: _record_allow's savepoint left out for a reservation against more than one budget
    # (``len(reserve) > 1 or any(len(c) > 1 ...)``). The chain's budgets are reserved root first:
    # the parent's holds the call's 200, the child's 100 refuses it; without the savepoint the
    # parent's 200 stay held for a call that never ran.
    helper = setup.gate.delegate(
        setup.agent,
        name="helper",
        key=setup.keys["helper"],
        capabilities=["model:small"],
        ttl=timedelta(seconds=60),
        budget=100,
    )
    auth = setup.gate.authorize(helper, Call.model("small"), tokens=(100, 50))
    # More than the helper's whole budget: refused as one it can never hold (review R82).
    assert not auth.allowed and auth.budget_never_fits and not auth.budget_exhausted
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)
    assert setup.gate.authorize(helper, Call.model("small"), tokens=(30, 20)).allowed  # 70: it fits


def test_an_approved_call_that_never_started_gets_its_approval_back(setup: Setup) -> None:
    # Kills: _write_outcome re-arming the approval only for a paused call
    # (``status == "paused"``, without ``or not started``). A call its approval let through but
    # that never ran (abandoned: its caller was cancelled) must not use the approval up: the run
    # resumed with the same approval runs the call, and the log says the request is pending again.
    call = Call.tool("refund", {"amount": 500})
    asked = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1")
    approval = Approval.sign(asked.approval_payload(), setup.keys["lead"])
    auth = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1", approval=approval)
    assert auth.allowed
    setup.gate.abandon(auth)
    setup.gate.flush()
    outcome = list(setup.gate.audit.entries())[-1]
    assert outcome.kind == "outcome" and any("pending again" in r for r in outcome.reasons), outcome.reasons
    again = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1", approval=approval)
    assert again.allowed, again.explain()
    ran: list[int] = []
    setup.gate.run(again, lambda: ran.append(500))
    assert ran == [500]


def test_a_chain_from_a_key_that_is_no_trust_anchor_delegates_nothing(setup: Setup) -> None:
    # Kills: delegate without ``_refuse_untrusted(parent)``: a grant self-issued by any key (or
    # by an anchor the policy has since rotated out) to a key the policy names would be
    # recorded, with an ``allow`` entry, as a delegation.
    forger = SigningKey.generate()
    chain = issue(forger, setup.keys["agent"].did, ["tool:lookup"], ttl=600, budget=Budget(100, "usd_micros"))
    forged = AgentIdentity("agent", setup.keys["agent"], chain)
    before = setup.gate.audit.size()
    with pytest.raises(Denied, match="not a trust anchor"):
        setup.gate.delegate(
            forged,
            name="helper",
            key=setup.keys["helper"],
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=60),
        )
    setup.gate.flush()
    assert [e.kind for e in list(setup.gate.audit.entries())[before:]] == ["deny"]
    assert setup.gate.delegations == []


DELEGATING = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  lead: {{kind: agent, did: "{lead}", roles: [payer]}}
tools:
  pay: {{args: {{}}}}
  search: {{args: {{}}}}
roles:
  payer:
    capabilities: [{{resource: "tool:pay"}}, {{resource: "tool:search"}}]
    budget: {{limit: 1000}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      budget: {{limit: 10}}
      capabilities: [{{resource: "tool:pay"}}]
"""


def test_a_delegation_is_bounded_at_the_policys_exact_limits_and_by_its_parents_lifetime(
    tmp_path: Path,
) -> None:
    # Kills: _check_delegation_rule admitting one second over ``max_ttl_s``
    # (``seconds <= d.max_ttl_s + 1``), a delegation with no budget of its own (the parent's
    # whole budget) under a rule that caps it (``budget is None or ...``), and delegate's TTL
    # not bounded by the parent's remaining life (``min(..., tip.expires - now)`` dropped).
    root, lead = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(DELEGATING.format(root=root.did, lead=lead.did), source="d.yaml")
    with Gate(policy, SQLiteStore(tmp_path / "d.db")) as gate:
        identity = gate.issue(root, name="lead", key=lead, role="payer")

        def hand(seconds: int, budget: int | None, caps: tuple[str, ...] = ("tool:pay",)) -> str:
            try:
                gate.delegate(
                    identity,
                    name="sub",
                    key=SigningKey.generate(),
                    capabilities=list(caps),
                    ttl=timedelta(seconds=seconds),
                    budget=budget,
                )
            except ScopeCreep as exc:
                assert exc.finding is not None
                return exc.finding.code
            return "ok"

        assert hand(60, 10) == "ok"
        assert hand(61, 10) == "delegation_ttl_above_policy"
        assert hand(60, 11) == "delegation_budget_above_policy"
        assert hand(60, None) == "delegation_budget_above_policy"
        assert hand(60, 10, ("tool:search",)) == "delegation_wider_than_policy"

    # Without a delegation TTL in the policy, the child still never outlives its parent.
    long_lived = SigningKey.generate()
    lenient = DELEGATING.replace("      max_ttl_s: 60\n", "").replace("ttl_s: 600", "ttl_s: 120")
    with Gate(
        parse_policy(lenient.format(root=root.did, lead=lead.did)), SQLiteStore(tmp_path / "e.db")
    ) as gate:
        parent = gate.issue(root, name="lead", key=lead, role="payer")
        child = gate.delegate(
            parent, name="sub", key=long_lived, capabilities=["tool:pay"], ttl=timedelta(hours=2), budget=5
        )
        assert child.chain.tip.expires <= parent.chain.tip.expires


def test_a_principal_whose_roles_may_not_delegate_hands_nothing_on(setup: Setup) -> None:
    # Kills: _check_delegation_rule's exemption for a run-time key widened to every holder whose
    # chain's first holder the policy names (``principal is None and`` dropped): the lead's role
    # has no ``delegation`` rule, yet its grant (max_depth 2 by default) could be handed on.
    lead = setup.gate.issue(setup.keys["root"], name="lead", key=setup.keys["lead"], role="lead")
    with pytest.raises(ScopeCreep, match="may not delegate at all"):
        setup.gate.delegate(
            lead,
            name="helper",
            key=setup.keys["helper"],
            capabilities=["tool:refund"],
            ttl=timedelta(seconds=60),
        )
    assert setup.gate.delegations == []


def test_an_identity_of_another_key_than_the_agents_own_is_refused_by_did(setup: Setup) -> None:
    # Kills: _precheck comparing only the agent's name (``agent_did`` ignored): a nested agent
    # named like its parent, or one that names no agent, runs on the parent's grant.
    call = Call.tool("lookup", {"id": "1"})
    auth = setup.gate.authorize(setup.agent, call, agent="agent", agent_did=setup.keys["helper"].did)
    assert not auth.allowed
    assert [f.code for f in auth.findings] == ["inherited_identity"]
    assert setup.gate.refuse_foreign(setup.agent, call, agent_did=setup.keys["helper"].did) is not None
    assert setup.gate.authorize(setup.agent, call, agent_did=setup.keys["agent"].did).allowed


def test_revoking_a_holder_audits_each_grant_it_revokes(setup: Setup) -> None:
    # Kills: Gate.revoke_holder writing a ``revoke`` entry for its first grant only (the log
    # would not show the other grants as revoked, though every call on them is refused).
    second = setup.gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
    before = setup.gate.audit.size()
    done = setup.gate.revoke_holder(setup.keys["agent"].did, reason="key leaked")
    assert set(done.revoked) == {setup.agent.chain.id, second.chain.id}
    setup.gate.flush()
    revoked = [e for e in list(setup.gate.audit.entries())[before:] if e.kind == "revoke"]
    assert sorted(e.chain_hash for e in revoked) == sorted(done.revoked)
    assert setup.gate.verify().ok


def test_only_a_trust_anchor_issues_root_grants(setup: Setup) -> None:
    # Kills: Gate.issue without its trust-anchor check: any key would issue a root grant, with
    # an ``allow`` entry for it in the log (every call on it is refused ``untrusted_root`` later,
    # but the log would show a grant this policy never trusted).
    stranger = SigningKey.generate()
    before = setup.gate.audit.size()
    with pytest.raises(Denied, match="not a trust anchor"):
        setup.gate.issue(stranger, name="agent", key=setup.keys["helper"], role="worker")
    setup.gate.flush()
    assert [e.kind for e in list(setup.gate.audit.entries())[before:]] == ["deny"]
