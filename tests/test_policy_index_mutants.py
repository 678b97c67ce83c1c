"""(Review R46, mutation round 4) gaps in the policy index that hand mutants survived, each pinned
by a test that kills its mutant (see the report of review R46, "mutation4").

Real components only: the policy parsed from YAML, its ``PolicyIndex``, and a ``Gate`` on a real
SQLite file for the quota that must be counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from langchain_core.messages import ToolMessage
from test_langgraph import _calls, _entries, _make_team, _tools

from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, identity_from_context
from agentgate.keys import SigningKey
from agentgate.policy import PolicyIndex, parse_policy
from agentgate.store import SQLiteStore

KEYS = {n: SigningKey.generate() for n in ("root", "agent", "lead")}

POLICY = parse_policy(
    f"""
version: 1
trust_anchors: {{root: {{did: "{KEYS["root"].did}"}}}}
principals:
  agent: {{kind: agent, did: "{KEYS["agent"].did}", roles: [senior]}}
  lead: {{kind: human, did: "{KEYS["lead"].did}", roles: [lead]}}
tools:
  other: {{args: {{n: {{type: integer}}}}}}
  refund: {{args: {{n: {{type: integer}}}}}}
  lookup: {{args: {{n: {{type: integer}}}}}}
models:
  m: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  base:
    kind: agent
    capabilities:
      - resource: tool:other
      - resource: tool:refund
      - resource: tool:lookup
      - resource: model:m
      - resource: "gpu:*"
        action: lease
        constraints: {{count: {{le: 4}}}}
    ttl_s: 600
  senior:
    kind: agent
    inherits: [base]
    ttl_s: 600
  lead:
    kind: human
    capabilities: [{{resource: tool:lookup}}]
    ttl_s: 600
approvals:
  long-generation:
    resource: model:m
    when: {{max_tokens: {{gt: 1000}}}}
    approvers: [lead]
quotas:
  two-tools:
    principal: agent
    window_s: 3600
    limit: 5
    resources: [tool:other, tool:refund]
  inherited-role:
    role: base
    window_s: 3600
    limit: 1
    resources: [tool:other, tool:refund]
""",
    source="mutation4.yaml",
)
INDEX = PolicyIndex(POLICY)


def test_a_quota_counts_a_call_on_any_of_its_resources_and_on_an_inherited_role() -> None:
    # p14: only a quota's first resource pattern was matched, so a call on its second resource
    # was counted by no quota. p15: a principal's quota subjects were the roles it holds, not
    # those it inherits, so a quota on ``base`` did not count the calls of ``agent`` (role
    # ``senior``, which inherits ``base``) although ``base``'s rule is what allows them.
    decision = INDEX.evaluate("agent", Call.tool("refund", {"n": 1}))
    assert decision.allowed and decision.role == "base" and decision.held_role == "senior"
    assert [(q.name, q.subject) for q in decision.quotas] == [
        ("two-tools", "principal:agent"),
        ("inherited-role", "role:base"),
    ]
    # The first resource of each quota, and a resource neither names.
    assert [q.name for q in INDEX.evaluate("agent", Call.tool("other", {"n": 1})).quotas] == [
        "two-tools",
        "inherited-role",
    ]
    assert INDEX.evaluate("agent", Call.tool("lookup", {"n": 1})).quotas == ()


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    made = Gate(POLICY, SQLiteStore(tmp_path / "agentgate.db"))
    yield made
    made.close()


def test_a_quota_on_an_inherited_role_refuses_the_call_past_its_limit_on_its_second_resource(
    gate: Gate,
) -> None:
    # p14 and p15 end to end: the quota ``inherited-role`` (role base, limit 1, its second
    # resource tool:refund) allows one refund per window to ``agent`` and refuses the next,
    # saying which quota; neither mutant counted the call at all.
    agent = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="senior")
    first = gate.authorize(agent, Call.tool("refund", {"n": 1}), call_id="r1")
    assert first.allowed
    gate.run(first, lambda: "refunded", call_id="r1")
    second = gate.authorize(agent, Call.tool("refund", {"n": 2}), call_id="r2")
    assert not second.allowed
    assert second.quota_exceeded == "inherited-role"
    assert second.reasons == ("quota inherited-role reached: 1 calls per 3600 s for role:base",)


def test_a_gpu_lease_without_its_constrained_argument_is_denied() -> None:
    # p19: a resource the policy does not declare (gpu:) is matched by its rules' constraints
    # directly; a call that leaves out the constrained argument ``count`` passed the rule
    # ``count <= 4``, a lease of an unbounded number of GPUs.
    assert INDEX.evaluate("agent", Call("gpu:h100", "lease", {"count": 4})).allowed
    assert not INDEX.evaluate("agent", Call("gpu:h100", "lease", {"count": 5})).allowed
    decision = INDEX.evaluate("agent", Call("gpu:h100", "lease", {}))
    assert decision.outcome is Outcome.DENY
    assert any("requires argument 'count'" in reason for reason in decision.reasons)


def test_a_gpu_name_that_is_not_canonical_is_denied_not_matched_by_a_wildcard() -> None:
    # p18: ``gpu:*`` named ``gpu:H100`` and ``gpu:h100 `` once the canonical check was skipped,
    # resources the gates and prices on ``gpu:h100`` do not name.
    for resource in ("gpu:H100", "gpu:h100 ", "gpu:h100/../b200"):
        decision = INDEX.evaluate("agent", Call(resource, "lease", {"count": 1}))
        assert decision.outcome is Outcome.DENY, resource
        assert decision.reasons[0].endswith("refused, never normalized"), decision.reasons


@pytest.mark.parametrize("value", ["100000", True, [100000], None, float("inf")])
def test_an_approval_gate_on_an_undeclared_model_argument_applies_to_a_value_it_cannot_compare(
    value: object,
) -> None:
    # p11: a model's arguments are not declared, so nothing types ``max_tokens`` before the gate
    # ``max_tokens > 1000`` reads it. A value the condition cannot compare (text, a bool, a
    # list, None, infinity) must make the gate apply (fail closed); without the ``_comparable``
    # check the condition was simply false and the call was allowed without approval.
    decision = INDEX.evaluate("agent", Call.model("m", {"max_tokens": value}))
    assert decision.outcome is Outcome.APPROVAL_REQUIRED, decision.reasons
    assert decision.approval is not None and decision.approval.gate == "long-generation"
    assert INDEX.evaluate("agent", Call.model("m", {"max_tokens": 1000})).allowed
    assert INDEX.evaluate("agent", Call.model("m", {"max_tokens": 1001})).outcome is Outcome.APPROVAL_REQUIRED


def test_two_gates_that_apply_need_the_larger_quorum_of_the_two() -> None:
    # p25: when several gates apply, one approval must meet each of them, so the combined
    # requirement takes the largest quorum. With the smallest, the gate ``two-person`` (quorum
    # 2 over payments above 1000) was met by a single approver whenever ``every-payment``
    # (quorum 1) applied too, which it always does: the two-person rule never held.
    policy = parse_policy(
        f"""
version: 1
principals:
  agent: {{kind: agent, did: "{KEYS["agent"].did}", roles: [r]}}
  alice: {{kind: human, roles: []}}
  bob: {{kind: human, roles: []}}
  carol: {{kind: human, roles: []}}
tools:
  pay: {{args: {{amount: {{type: integer}}}}}}
roles:
  r: {{ttl_s: 60, capabilities: [{{resource: tool:pay}}]}}
approvals:
  every-payment: {{resource: "tool:pay", approvers: [alice, bob, carol], quorum: 1, expiry_s: 300}}
  two-person: {{resource: "tool:*", when: {{amount: {{gt: 1000}}}}, approvers: [alice, bob, carol], quorum: 2}}
""",
        source="quorum.yaml",
    )
    index = PolicyIndex(policy)
    small = index.evaluate("agent", Call.tool("pay", {"amount": 10})).approval
    assert small is not None and small.gate == "every-payment" and small.quorum == 1
    large = index.evaluate("agent", Call.tool("pay", {"amount": 5000}))
    assert large.outcome is Outcome.APPROVAL_REQUIRED and large.approval is not None
    assert large.approval.gate == "every-payment+two-person"
    assert large.approval.quorum == 2 and large.approval.expiry_s == 300
    assert large.approval.approvers == ("alice", "bob", "carol")
    assert "2 of alice, bob, carol must approve" in large.reasons[-1]


@pytest.mark.parametrize("carried", ["supervisor", {"name": "supervisor"}, None])
def test_a_run_context_that_carries_something_else_than_an_identity_is_a_run_without_one(
    tmp_path: Path, carried: object
) -> None:
    # l05: ``identity_from_context`` returned whatever a context's ``agentgate`` attribute or key
    # held; a run whose context carries a name or a dict there crashed in the middleware with an
    # AttributeError (``'str' object has no attribute 'did'``) instead of the refusal of a run
    # without an identity: recorded, nothing run.
    assert identity_from_context({"agentgate": carried}) is None
    assert identity_from_context(SimpleNamespace(agentgate=carried)) is None
    team = _make_team(tmp_path)
    try:
        assert identity_from_context({"agentgate": team.supervisor}) is team.supervisor
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))]),
            tools=_tools(team),
            gate_models=False,
        )
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "go"}]}, context=SimpleNamespace(agentgate=carried)
        )
        (refused,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert refused.status == "error" and "carries no agent identity" in str(refused.content)
        assert team.ran == []
        denies = [e for e in _entries(team.gate) if e.kind == "deny" and e.resource == "tool:search"]
        assert len(denies) == 1
    finally:
        team.gate.close()
