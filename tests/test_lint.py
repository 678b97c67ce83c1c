"""The policy linter (agentgate/policy/_lint.py) on approval gates: a gate on a model call or a
declared argument is no error, a gate on an undeclared resource is told what to name, and a
rule's bounds decide whether a sibling tool is a path around a gate."""

from __future__ import annotations

import pytest
from test_policy_lint_bypass_siblings import _findings as _lint_findings

from agentgate.policy import parse_policy


def test_an_approval_gate_on_a_model_call_is_no_lint_error() -> None:
    """docs/gateway.md ("Calls behind an approval gate") puts a model call behind a gate on
    `max_tokens`, and the Gate and the gateway enforce it; `policy lint` called that policy broken
    (gate_on_undeclared_argument: "guards model:..., which names no declared tool", exit 1)."""
    from agentgate.policy import lint

    policy = parse_policy(
        """
version: 1
trust_anchors: {root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}
principals:
  bot: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}
  lead: {kind: human, did: did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj}
models:
  qwen3-32b: {cost_per_mtok: {input: 1, output: 1}}
roles:
  chat:
    capabilities: [{resource: "model:qwen3-32b", constraints: {max_tokens: {le: 4096}}}]
    ttl_s: 600
approvals:
  long-answers:
    resource: model:qwen3-32b
    when: {max_tokens: {gt: 100}}
    approvers: [lead]
""",
        source="gated-model.yaml",
    )
    assert [f.code for f in lint(policy)] == []


@pytest.mark.parametrize(
    ("resource", "hint"),
    [
        ("model:other", "make the gate's resource name a model declared under models:"),
        ("tool:other", "make the gate's resource name a tool declared under tools:"),
    ],
)
def test_a_gate_on_an_undeclared_resource_is_told_what_to_name(resource: str, hint: str) -> None:
    """R47 (docs helper): the lint hint said "name an argument the guarded tool declares" for a
    gate on an undeclared model too."""
    from agentgate.policy import lint, parse_policy

    policy = parse_policy(
        f"""
version: 1
trust_anchors: {{root: {{did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}}}
principals:
  bot: {{kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}}
  lead: {{kind: human, did: did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj}}
models:
  qwen3-32b: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  chat:
    capabilities: [{{resource: "model:qwen3-32b", constraints: {{max_tokens: {{le: 4096}}}}}}]
    ttl_s: 600
approvals:
  long-answers:
    resource: {resource}
    when: {{max_tokens: {{gt: 100}}}}
    approvers: [lead]
""",
        source="gated.yaml",
    )
    found = [f for f in lint(policy) if f.code == "gate_on_undeclared_argument"]
    assert [f.hint for f in found] == [hint]


def test_a_listed_value_the_rules_bounds_exclude_opens_no_path_around_a_gate() -> None:
    """Kills R48 lintkeys' l38 (``_of_type`` keeping every listed value, ``constraint.allows``
    dropped): a wildcard rule allowing ``amount in [100, 900]`` and ``<= 500`` reaches the gated
    tool's sibling with 100 only, under the gate's ``> 500``: no ``approval_gate_bypass``; without
    the bound, 900 is a path around it."""
    body = """tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
  payments.refund_partial:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
roles:
  r:
    capabilities:
      - {resource: "tool:payments.*", constraints: {amount: {in: [100, 900], le: 500}}}
    ttl_s: 600
approvals:
  large-refund:
    resource: tool:payments.refund
    when: {amount: {gt: 500}}
    approvers: [alice]
"""
    assert _lint_findings(body, "approval_gate_bypass") == []
    found = _lint_findings(body.replace("in: [100, 900], le: 500", "in: [100, 900]"), "approval_gate_bypass")
    assert [f.code for f in found] == ["approval_gate_bypass"]
