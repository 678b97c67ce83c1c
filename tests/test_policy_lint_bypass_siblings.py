"""Approval-gate bypasses that are not bypasses, shadowed rules
found whatever the roles are called, gate conditions no value of the type satisfies, and
witness calls the tool would accept."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.findings import Finding, Outcome
from agentgate.policy import PolicyIndex, lint, parse_policy

HEAD = """version: 1
trust_anchors:
  root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}
principals:
  svc: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [r]}
  alice: {kind: human, did: did:key:z6MkkNV2MQswkwEnXrUkeM7T8qYE3qWB163VBePnsLBSTAru}
"""

PAYMENTS = """tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: number, required: true}}
  payments.refund_partial:
    args: {order_id: {type: string, required: true}, amount: {type: number, required: true}}
  payments.status:
    args: {order_id: {type: string, required: true}}
roles:
  r:
    capabilities: [{resource: "tool:payments.*"}]
    ttl_s: 600
"""


def _findings(body: str, code: str) -> list[Finding]:
    return [f for f in lint(parse_policy(HEAD + body, source="p.yaml")) if f.code == code]


# --- approval_gate_bypass: a sibling with its own gate, or other arguments, is no path around ----


def test_a_sibling_that_its_own_equal_gate_guards_is_no_bypass() -> None:
    body = (
        PAYMENTS
        + """approvals:
  large-refund:
    resource: tool:payments.refund
    when: {amount: {gt: 500}}
    approvers: [alice]
  large-partial-refund:
    resource: tool:payments.refund_partial
    when: {amount: {gt: 500}}
    approvers: [alice]
"""
    )
    assert _findings(body, "approval_gate_bypass") == []


def test_a_sibling_that_a_looser_gate_guards_is_still_a_bypass() -> None:
    body = (
        PAYMENTS
        + """approvals:
  large-refund:
    resource: tool:payments.refund
    when: {amount: {gt: 500}}
    approvers: [alice]
  huge-partial-refund:
    resource: tool:payments.refund_partial
    when: {amount: {gt: 5000}}
    approvers: [alice]
"""
    )
    found = _findings(body, "approval_gate_bypass")
    assert [f.message.split(" reaches ")[1].split(",")[0] for f in found] == ["tool:payments.refund_partial"]
    index = PolicyIndex(parse_policy(HEAD + body))
    around = Call.tool("payments.refund_partial", {"order_id": "o", "amount": 900})
    assert index.evaluate("svc", around).outcome is Outcome.ALLOW  # the path the finding names


def test_a_gate_on_every_call_is_not_bypassed_by_a_tool_with_other_arguments() -> None:
    body = (
        PAYMENTS
        + """approvals:
  every-refund:
    resource: tool:payments.refund
    approvers: [alice]
"""
    )
    found = _findings(body, "approval_gate_bypass")
    assert len(found) == 1
    assert "tool:payments.refund_partial" in found[0].message
    assert "tool:payments.status" not in found[0].message  # it takes no amount: not "the same arguments"


# --- shadowed_rule: the same answer whatever the roles are called ----------------------------------


@pytest.mark.parametrize("child", ["zed", "alpha"])
def test_a_rule_repeating_an_inherited_one_is_shadowed_whatever_the_names(child: str) -> None:
    body = f"""tools:
  tickets.read: {{args: {{id: {{type: string}}}}}}
roles:
  r:
    capabilities: [{{resource: tool:tickets.read}}]
    ttl_s: 600
  {child}:
    inherits: [r]
    capabilities: [{{resource: tool:tickets.read}}]
    ttl_s: 600
"""
    found = _findings(body, "shadowed_rule")
    assert [(f.line, f.message.split(" rule ")[0]) for f in found] == [(15, f"role {child}")]


# --- constraint_type_mismatch: gate conditions and delegation entries too --------------------------


@pytest.mark.parametrize(
    ("declared", "condition"),
    [("number", '{eq: "500"}'), ("string", "{gt: 500}"), ("number", '{prefix: "5"}')],
)
def test_a_gate_condition_no_value_of_the_type_satisfies_is_an_error(declared: str, condition: str) -> None:
    body = f"""tools:
  payments.refund:
    args: {{order_id: {{type: string, required: true}}, amount: {{type: {declared}, required: true}}}}
roles:
  r:
    capabilities: [{{resource: tool:payments.refund}}]
    ttl_s: 600
approvals:
  large-refund:
    resource: tool:payments.refund
    when: {{amount: {condition}}}
    approvers: [alice]
"""
    found = _findings(body, "constraint_type_mismatch")
    assert [(f.line, f.severity) for f in found] == [(17, "error")]
    assert "approval gate large-refund" in found[0].message
    # What the finding is about: a small refund, compared with nothing, needs approval.
    small = Call.tool("payments.refund", {"order_id": "o", "amount": 3 if declared == "number" else "3"})
    decision = PolicyIndex(parse_policy(HEAD + body)).evaluate("svc", small)
    assert decision.outcome is Outcome.APPROVAL_REQUIRED


def test_a_gate_condition_of_the_right_type_is_not_a_mismatch() -> None:
    body = """tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: number, required: true}}
roles:
  r:
    capabilities: [{resource: tool:payments.refund}]
    ttl_s: 600
approvals:
  large-refund:
    resource: tool:payments.refund
    when: {amount: {gt: 500}, order_id: {prefix: "vip-"}}
    approvers: [alice]
"""
    assert _findings(body, "constraint_type_mismatch") == []


def test_a_delegation_entry_no_value_of_the_type_satisfies_is_an_error() -> None:
    body = """tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
roles:
  r:
    capabilities: [{resource: tool:payments.refund}]
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      capabilities: [{resource: tool:payments.refund, constraints: {amount: {eq: "5"}}}]
"""
    found = _findings(body, "constraint_type_mismatch")
    assert [f.line for f in found] == [17]


def test_a_type_mismatch_shows_the_value_as_written() -> None:
    body = """tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
roles:
  r:
    capabilities: [{resource: tool:payments.refund, constraints: {amount: {eq: "5"}}}]
    ttl_s: 600
"""
    (found,) = _findings(body, "constraint_type_mismatch")
    assert 'amount is an integer but the constraint {"eq": "5"} admits no integer' in found.message


# --- delegation_wider_than_role: the witness is a call the tool accepts ----------------------------


@pytest.mark.parametrize(
    ("declared", "held", "example"),
    [
        ("number", "{le: 100}", "{'amount': 1000000}"),
        ("integer", "{le: 100}", "{'amount': 1000000}"),
        ("integer", "{ge: 0}", "{'amount': -9223372036854775807}"),
        ("boolean", "{eq: false}", "{'amount': True}"),
    ],
)
def test_the_witness_of_an_unconstrained_delegation_has_the_declared_type(
    declared: str, held: str, example: str
) -> None:
    body = f"""tools:
  payments.refund:
    args: {{order_id: {{type: string, required: true}}, amount: {{type: {declared}}}}}
roles:
  r:
    capabilities: [{{resource: tool:payments.refund, constraints: {{amount: {held}}}}}]
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      capabilities: [{{resource: tool:payments.refund}}]
"""
    (found,) = _findings(body, "delegation_wider_than_role")
    assert found.message.endswith(f"; e.g. {example}")
    # The tool accepts the example's arguments by type: a rule without constraints allows it.
    open_rule = body.replace(f"constraints: {{amount: {held}}}", "constraints: {}")
    assert open_rule != body
    index = PolicyIndex(parse_policy(HEAD + open_rule))
    call = Call.tool("payments.refund", {"order_id": "o", **ast.literal_eval(example)})
    assert index.evaluate("svc", call).outcome is Outcome.ALLOW


# --- docs/gateway.md on a gate on a model ---------------------------------------------------------


def test_a_gate_on_a_declared_model_lints_clean_as_the_gateway_page_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        HEAD
        + """models:
  qwen3-32b: {cost_per_mtok: {input: 1, output: 1}}
roles:
  r:
    capabilities: [{resource: model:qwen3-32b}]
    ttl_s: 600
approvals:
  long-answers:
    resource: model:qwen3-32b
    when: {max_tokens: {gt: 4096}}
    approvers: [alice]
"""
    )
    assert main(["policy", "lint", str(policy)]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out
    page = (Path(__file__).parent.parent / "docs" / "gateway.md").read_text()
    assert "known defect of the linter" not in page
