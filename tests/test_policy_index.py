"""Evaluation: the index answers exactly what scanning every rule would, on the example policies too;
the quotas that count a call, GPU lease constraints and approval gates (quorums, values a gate
cannot compare) as ``PolicyIndex`` applies them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import Call, attenuates, covers
from agentgate.errors import PolicyError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import Outcome, PolicyIndex, load_policy, parse_policy, role_grant_template
from agentgate.store import SQLiteStore

POLICIES = Path(__file__).resolve().parents[1] / "policies"
SUPPORT = load_policy(POLICIES / "support.yaml")
RESEARCH = load_policy(POLICIES / "research_team.yaml")
GPU = load_policy(POLICIES / "gpu_platform.yaml")


def _refund(amount: Any, currency: str = "EUR") -> Call:
    return Call.tool("payments.refund", {"order_id": "o-1", "amount": amount, "currency": currency})


def test_support_agent_small_refund_is_allowed_with_budget_and_quotas() -> None:
    decision = PolicyIndex(SUPPORT).evaluate("support-agent", _refund(80))
    assert decision.outcome is Outcome.ALLOW and decision.allowed
    assert decision.role == "support-agent" and decision.rule is not None and decision.rule.line is not None
    assert decision.budget is not None and (decision.budget.limit, decision.budget.unit) == (500, "calls")
    assert {q.name for q in decision.quotas} == {"agent-refunds-per-hour", "acme-calls-per-minute"}


def test_support_agent_refund_above_the_limit_needs_an_approval() -> None:
    decision = PolicyIndex(SUPPORT).evaluate("support-agent", _refund(500.5))
    assert decision.outcome is Outcome.APPROVAL_REQUIRED and not decision.allowed
    assert decision.approval is not None
    assert decision.approval.approvers == ("alice", "bob") and decision.approval.quorum == 1
    assert decision.approval.approver_dids == (SUPPORT.principal_dids["alice"], SUPPORT.principal_dids["bob"])


def test_support_agent_refund_beyond_its_reach_is_denied_with_the_reason() -> None:
    index = PolicyIndex(SUPPORT)
    decision = index.evaluate("support-agent", _refund(2500))
    assert decision.outcome is Outcome.DENY and "amount=2500" in decision.reasons[0]
    assert index.evaluate("support-agent", _refund(10, "GBP")).outcome is Outcome.DENY
    assert index.evaluate("alice", _refund(2500, "GBP")).outcome is Outcome.APPROVAL_REQUIRED


def test_principal_may_be_named_by_did() -> None:
    index = PolicyIndex(SUPPORT)
    did = SUPPORT.principal_dids["support-agent"]
    assert did is not None and index.principal_name(did) == "support-agent"
    assert index.evaluate(did, _refund(10)).allowed


def test_research_sub_agents_hold_less_than_the_supervisor() -> None:
    index = PolicyIndex(RESEARCH)
    blog = Call.tool("web.fetch", {"url": "https://blog.example/post"})
    arxiv = Call.tool("web.fetch", {"url": "https://arxiv.org/abs/2401.00001"})
    assert index.evaluate("supervisor", blog).allowed
    assert not index.evaluate("researcher", blog).allowed
    assert index.evaluate("researcher", arxiv).allowed
    final = Call.tool("docs.write", {"path": "reports/final/r.md", "content": "x"})
    assert index.evaluate("supervisor", final).allowed and not index.evaluate("writer", final).allowed
    publish = Call.tool("docs.publish", {"path": "reports/final/r.md"})
    assert index.evaluate("supervisor", publish).outcome is Outcome.APPROVAL_REQUIRED
    assert index.evaluate("researcher", publish).outcome is Outcome.DENY


def test_research_delegation_rule_only_hands_on_what_the_supervisor_holds() -> None:
    held = [r.capability for r in RESEARCH.effective_rules("supervisor")]
    for rule in RESEARCH.delegable["supervisor"]:
        assert any(attenuates(h, rule.capability) for h in held)


def test_gpu_platform_priority_classes_and_tenant_quotas() -> None:
    index = PolicyIndex(GPU)
    interactive = Call.model("llama-3.1-8b", {"max_tokens": 512, "priority": "interactive"})
    assert index.evaluate("svc-a", interactive).allowed
    assert not index.evaluate("svc-b", interactive).allowed
    batch = Call.model("llama-3.1-70b", {"max_tokens": 512, "priority": "batch"})
    decision = index.evaluate("svc-b", batch)
    assert decision.allowed and {q.name for q in decision.quotas} == {"team-b-tokens-per-hour"}
    lease = Call("gpu:h100", "lease", {"count": 4, "grace_s": 120})
    assert index.evaluate("svc-a", lease).allowed and not index.evaluate("agent-a", lease).allowed
    assert index.evaluate("erin", Call("gpu:b200", "lease", {"count": 64})).allowed


def test_role_grant_template_holds_exactly_the_role() -> None:
    caps, budget, ttl, depth = role_grant_template(RESEARCH, "supervisor")
    assert caps == tuple(r.capability for r in RESEARCH.rules["supervisor"])
    assert budget is not None and budget.limit == 20_000_000 and ttl == 7200 and depth == 1
    assert role_grant_template(SUPPORT, "support-agent").max_depth == 0
    with pytest.raises(PolicyError, match="no role"):
        role_grant_template(SUPPORT, "root")


def test_role_grant_template_includes_inherited_rules_and_caps_the_ttl() -> None:
    policy = parse_policy(
        "version: 1\nsettings: {max_ttl_s: 100}\n"
        "roles:\n  base: {capabilities: [{resource: 'tool:a'}], ttl_s: 50}\n"
        "  top: {inherits: [base], capabilities: [{resource: 'tool:b'}]}\n"
        "  long: {capabilities: [{resource: 'tool:c'}], ttl_s: 1000}\n"
    )
    template = role_grant_template(policy, "top")
    assert [c.resource for c in template.capabilities] == ["tool:b", "tool:a"]
    assert template.ttl_s == 100 and role_grant_template(policy, "long").ttl_s == 100


_POLICY = parse_policy(
    """
version: 1
principals:
  p: {kind: service, did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm, roles: [r1, r2]}
tools:
  pay.refund: {args: {amount: {type: number}, cur: {type: string}}}
  pay.void: {args: {amount: {type: number}, cur: {type: string}}}
  crm.read: {args: {amount: {type: number}, cur: {type: string}}}
roles:
  r1:
    capabilities:
      - {resource: "tool:pay.refund", constraints: {amount: {le: 100}}}
      - {resource: "tool:pay.*", constraints: {cur: {in: [EUR]}, amount: {gt: 50}}}
  r2:
    inherits: [r3]
  r3:
    capabilities:
      - {resource: "tool:crm.read", constraints: {cur: {prefix: U}}}
"""
)
_INDEX = PolicyIndex(_POLICY)


@settings(max_examples=300, deadline=None)
@given(
    tool=st.sampled_from(["pay.refund", "pay.void", "crm.read"]),
    amount=st.one_of(st.none(), st.floats(-10, 300, allow_nan=False), st.integers(-10, 300)),
    cur=st.one_of(st.none(), st.sampled_from(["EUR", "USD", "eur", "U", ""])),
)
def test_index_agrees_with_scanning_every_rule(tool: str, amount: float | None, cur: str | None) -> None:
    args: dict[str, Any] = {k: v for k, v in (("amount", amount), ("cur", cur)) if v is not None}
    call = Call.tool(tool, args)
    scanned = any(
        covers(rule.capability, call) for role in _POLICY.principal_roles("p") for rule in _POLICY.rules[role]
    )
    assert _INDEX.evaluate("p", call).allowed == scanned


_NUMBERS = st.one_of(
    st.integers(-5, 5), st.floats(-5, 5), st.sampled_from([float("inf"), float("-inf"), float("nan"), True])
)


@settings(max_examples=400, deadline=None)
@given(
    bounds=st.dictionaries(st.sampled_from(["lt", "le", "gt", "ge"]), st.integers(-3, 3) | st.floats(-3, 3)),
    value=_NUMBERS,
)
def test_compiled_numeric_checks_agree_with_the_constraint(bounds: dict[str, float], value: object) -> None:
    from agentgate.capabilities import Capability
    from agentgate.policy._index import _compile, _passes
    from agentgate.policy._load import RuleRef

    if not bounds:
        return
    cap = Capability.of("tool:x", None, {"n": bounds})
    compiled = _compile(RuleRef("r", 0, cap))
    assert _passes(compiled, {"n": value}) == cap.constraint_map["n"].allows(value)


def test_an_inherited_rule_spends_the_budget_of_the_role_held() -> None:
    policy = parse_policy(
        "version: 1\n"
        "principals:\n  lead: {kind: human, did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm, roles: [lead]}\n"
        "tools:\n  a: {}\n"
        "roles:\n  base: {capabilities: [{resource: 'tool:a'}], budget: {limit: 10}, ttl_s: 60}\n"
        "  lead: {inherits: [base], budget: {limit: 1000}, ttl_s: 60}\n"
    )
    decision = PolicyIndex(policy).evaluate("lead", Call.tool("a"))
    assert decision.allowed and decision.role == "base" and decision.held_role == "lead"
    template = role_grant_template(policy, "lead")
    assert template.budget is not None and template.budget.limit == 1000
    assert decision.budget == template.budget


def test_an_approval_gate_on_an_exact_gpu_resource_applies() -> None:
    # Resources that need no declaration (gpu:) are matched by their rules; the gates on that very
    # resource apply to them as well as the wildcard ones (only the wildcard ones did before).
    policy = parse_policy(
        """
version: 1
principals:
  svc: {kind: service, roles: [trainer]}
  lead: {kind: human, did: did:key:z6MkkBfAKBNKKnAqDCekq181CgEYG7u4aShm7E9yRQtUFbcj, roles: [trainer]}
roles:
  trainer:
    kind: service
    capabilities:
      - resource: gpu:h100
        constraints: {count: {le: 8}}
    ttl_s: 600
approvals:
  big: {resource: gpu:h100, when: {count: {gt: 4}}, approvers: [lead]}
  any: {resource: "gpu:*", when: {count: {gt: 7}}, approvers: [lead]}
""",
        source="gpu.yaml",
    )
    index = PolicyIndex(policy)
    assert index.evaluate("svc", Call("gpu:h100", "lease", {"count": 2})).outcome is Outcome.ALLOW
    big = index.evaluate("svc", Call("gpu:h100", "lease", {"count": 5}))
    assert (
        big.outcome is Outcome.APPROVAL_REQUIRED and big.approval is not None and big.approval.gate == "big"
    )
    assert index.evaluate("svc", Call("gpu:h100", "lease", {"count": 8})).outcome is Outcome.APPROVAL_REQUIRED


# --- quotas, GPU leases, gates and quorums on one policy ------------------------------------------
# Real components only: the policy parsed from YAML, its ``PolicyIndex``, and a ``Gate`` on a real
# SQLite file for the quota that must be counted.


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
  # The longest window (10 years): windows are aligned to the epoch, and an hour's could roll
  # over between the allow and the refusal of the end-to-end test below.
  two-tools:
    principal: agent
    window_s: 315360000
    limit: 5
    resources: [tool:other, tool:refund]
  inherited-role:
    role: base
    window_s: 315360000
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
    assert second.reasons == ("quota inherited-role reached: 1 calls per 315360000 s for role:base",)


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


@pytest.mark.parametrize("value", ["100000", True, [100000], None])
def test_an_approval_gate_on_an_undeclared_model_argument_applies_to_a_value_it_cannot_compare(
    value: object,
) -> None:
    # p11: a model's arguments are not declared, so nothing types ``max_tokens`` before the gate
    # ``max_tokens > 1000`` reads it. A value the condition cannot compare (text, a bool, a
    # list, None) must make the gate apply (fail closed); without the ``_comparable`` check the
    # condition was simply false and the call was allowed without approval. (Infinity, here
    # until review R86b, is now denied before any gate is read, as the Gate denies it:
    # tests/test_policy_r86b_undigestable_args.py.)
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
  alice: {{kind: human, did: "{KEYS["root"].did}", roles: []}}
  bob: {{kind: human, did: "{KEYS["lead"].did}", roles: []}}
  carol: {{kind: human, did: "{SigningKey.generate().did}", roles: []}}
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


class _StartsWithAnything(str):
    def startswith(self, *args: Any, **kwargs: Any) -> bool:
        return True


class _EqualsAnything(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


def test_a_model_calls_arguments_are_decided_on_their_plain_values() -> None:
    # Review R51: a model's (or a GPU's) arguments are not typed by a declaration, so a ``str``
    # subclass whose ``startswith`` says yes passed ``user: {prefix: team-a/}`` and an ``int``
    # subclass whose ``__eq__`` says yes passed ``n: {in: [1, 2]}``: the call was allowed, and
    # recorded with the values it really held (``team-b/x``, 64). The call holds plain values.
    policy = parse_policy(
        """
version: 1
principals:
  agent: {kind: agent, roles: [r]}
models:
  m: {cost_per_mtok: {input: 1, output: 1}}
roles:
  r:
    kind: agent
    ttl_s: 600
    capabilities:
      - resource: model:m
        constraints: {user: {prefix: "team-a/"}, n: {in: [1, 2]}}
      - resource: gpu:h100
        constraints: {count: {eq: 1}}
""",
        source="plain.yaml",
    )
    index = PolicyIndex(policy)
    assert index.evaluate("agent", Call.model("m", {"user": "team-a/x", "n": 1})).allowed
    for args in (
        {"user": _StartsWithAnything("team-b/x"), "n": 1},
        {"user": "team-a/x", "n": _EqualsAnything(64)},
    ):
        decision = index.evaluate("agent", Call.model("m", args))
        assert decision.outcome is Outcome.DENY, args
    decision = index.evaluate("agent", Call("gpu:h100", "lease", {"count": _EqualsAnything(8)}))
    assert decision.outcome is Outcome.DENY and "count=8 does not satisfy" in decision.reasons[0]


def test_a_decision_names_only_the_quotas_that_count_something_for_the_call() -> None:
    # Review R51: an allow named every quota whose resources matched, so a tool call listed a
    # ``usd_micros`` quota that the Gate never charges it (a tool call costs one call), and
    # ``policy explain`` showed it as a limit on the call. A quota is named when the call costs
    # something in its unit: calls always, tokens and money on a model, money on a priced GPU.
    policy = parse_policy(
        """
version: 1
principals:
  agent: {kind: agent, roles: [r]}
tools:
  t: {args: {}}
models:
  m: {cost_per_mtok: {input: 1, output: 1}}
gpus:
  h100: {cost_per_gpu_hour: 1000000}
  free: {cost_per_gpu_hour: 0}
roles:
  r:
    kind: agent
    ttl_s: 600
    capabilities: [{resource: tool:t}, {resource: model:m}, {resource: "gpu:*", action: lease}]
quotas:
  calls: {role: r, window_s: 60, limit: 10, resources: ["tool:*", "model:*", "gpu:*"]}
  tokens: {role: r, window_s: 60, limit: 10, unit: tokens, resources: ["tool:*", "model:*", "gpu:*"]}
  money: {role: r, window_s: 60, limit: 10, unit: usd_micros, resources: ["tool:*", "model:*", "gpu:*"]}
""",
        source="units.yaml",
    )
    index = PolicyIndex(policy)

    def named(call: Call) -> list[str]:
        decision = index.evaluate("agent", call)
        assert decision.allowed, decision.reasons
        return [q.name for q in decision.quotas]

    assert named(Call.tool("t", {})) == ["calls"]
    assert named(Call.model("m", {})) == ["calls", "tokens", "money"]
    assert named(Call("gpu:h100", "lease", {})) == ["calls", "money"]
    assert named(Call("gpu:b200", "lease", {})) == ["calls"]  # no price: the lease costs no money
    assert named(Call("gpu:free", "lease", {})) == ["calls"]  # a price of 0: nor does this one


def test_an_argument_of_the_wrong_type_is_refused_in_plain_words() -> None:
    # Found: "argument 'n' must be a integer, got str" in every such refusal and audit entry.
    reasons = INDEX.evaluate("agent", Call.tool("refund", {"n": "5"})).reasons
    assert reasons == ("argument 'n' must be an integer, got str",)


_KEYED_GATE = """
version: 1
principals:
  agent: {{kind: agent, did: "{agent}", roles: [r]}}
  alice: {{kind: human, did: "{alice}"}}
  bob: {{kind: human{bob}}}
tools:
  pay: {{args: {{amount: {{type: integer}}}}}}
roles:
  r: {{ttl_s: 60, capabilities: [{{resource: tool:pay}}]}}
approvals:
  pay: {{resource: tool:pay, approvers: [alice, bob], quorum: {quorum}}}
"""


def _keyed_gate(quorum: int, bob: str = "", agent: str = "") -> PolicyIndex:
    text = _KEYED_GATE.format(
        agent=agent or KEYS["agent"].did, alice=KEYS["lead"].did, bob=bob, quorum=quorum
    )
    return PolicyIndex(parse_policy(text, source="keyed.yaml"))


def test_a_quorum_that_only_an_approver_without_a_key_could_complete_is_denied_naming_it() -> None:
    # R53: an approval is a signature, and bob has no key: a quorum of 2 over alice and bob can
    # never be met, yet the call was approval_required each time it was asked, for ever.
    refused = _keyed_gate(2).evaluate("agent", Call.tool("pay", {"amount": 1}))
    assert refused.outcome is Outcome.DENY and refused.approval is None
    assert "only 1 distinct key(s) for a quorum of 2 (bob has no key)" in refused.reasons[-1]
    # Who may approve is unchanged: a quorum alice alone can meet still lists bob.
    asked = _keyed_gate(1).evaluate("agent", Call.tool("pay", {"amount": 1}))
    assert asked.outcome is Outcome.APPROVAL_REQUIRED and asked.approval is not None
    assert asked.approval.approvers == ("alice", "bob") and asked.approval.quorum == 1


def test_approvers_sharing_a_key_or_the_requesters_key_are_not_distinct_signers() -> None:
    shared = _keyed_gate(2, bob=f', did: "{KEYS["lead"].did}"')
    refused = shared.evaluate("agent", Call.tool("pay", {"amount": 1}))
    assert refused.outcome is Outcome.DENY
    assert "only 1 distinct key(s) for a quorum of 2 (some share a key" in refused.reasons[-1]
    # The requester holds alice's key: only bob's signature could count, and he has none.
    own = _keyed_gate(1, agent=KEYS["lead"].did)
    assert own.evaluate("agent", Call.tool("pay", {"amount": 1})).outcome is Outcome.DENY
    keyed = _keyed_gate(2, bob=f', did: "{KEYS["root"].did}"')
    assert keyed.evaluate("agent", Call.tool("pay", {"amount": 1})).outcome is Outcome.APPROVAL_REQUIRED
