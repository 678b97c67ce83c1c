"""``policy explain`` for a principal that holds several roles (agentgate/policy/_explain.py,
``PolicyIndex.allowed_through``): every held role through which a rule allows the call is named,
with its rule and budget, and the one that decided is said, with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.policy import PolicyIndex, explain, parse_policy

# alice holds clerk (which inherits base) and payer: base allows refunds up to 50, payer (on a
# wildcard, on another budget) up to 500.
TWO_ROLES = """\
version: 1
principals:
  alice: {kind: human, roles: [clerk, payer]}
tools:
  payments.refund:
    args: {amount: {type: integer}}
gpus:
  h100: {cost_per_gpu_hour: 0}
roles:
  base:
    capabilities:
      - resource: tool:payments.refund
        constraints: {amount: {le: 50}}
      - resource: gpu:h100
  clerk:
    inherits: [base]
    budget: {limit: 10, unit: calls}
  payer:
    capabilities:
      - resource: tool:payments.*
        constraints: {amount: {le: 500}}
      - resource: gpu:*
    budget: {limit: 1000000, unit: usd_micros}
"""


def _refund(amount: int) -> Call:
    return Call.tool("payments.refund", {"amount": amount})


def test_explain_names_every_held_role_that_allows_and_which_decided() -> None:
    """Review R60: explain of a principal holding two roles named only the first role's rule and budget.

    A call both roles allow names clerk's rule (through base, which clerk inherits) as the one that
    decided, says why (the first role alice's entry lists whose rules allow it), and names payer's
    rule and budget too: a grant for payer carries the call on payer's budget."""
    index = PolicyIndex(parse_policy(TWO_ROLES))
    decision, text = explain(index, "alice", _refund(20))
    assert decision.allowed and decision.held_role == "clerk" and decision.rule is not None
    lines = text.split("\n")
    assert "  roles held: clerk, base (inherited through clerk), payer" in lines
    assert "  held through: role clerk, which inherits role base" in lines
    assert any(line.startswith("  decided by role clerk: the first of alice's roles") for line in lines)
    assert "  budget of role clerk: 10 calls per grant" in lines
    assert (
        "  also allowed through role payer: role payer rule 1: tool:payments.* where amount <= 500"
        " (line 20); budget of role payer: 1000000 usd_micros per grant"
    ) in lines


def test_explain_of_a_call_one_role_allows_names_only_that_role() -> None:
    """Only payer allows 80: no "decided by" or "also allowed" line; a deny names no rule."""
    index = PolicyIndex(parse_policy(TWO_ROLES))
    decision, text = explain(index, "alice", _refund(80))
    assert decision.held_role == "payer"
    assert "decided by" not in text and "also allowed" not in text and "held through" not in text
    _, denied = explain(index, "alice", _refund(800))
    assert "also allowed" not in denied and "decided by" not in denied


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (_refund(20), [("clerk", "base"), ("payer", "payer")]),
        (_refund(80), [("payer", "payer")]),
        (_refund(800), []),
        (Call("gpu:h100", "lease", {}), [("clerk", "base"), ("payer", "payer")]),
        (Call("gpu:a100", "lease", {}), [("payer", "payer")]),
    ],
)
def test_allowed_through_starts_with_the_decision(call: Call, expected: list[tuple[str, str]]) -> None:
    """``allowed_through`` lists each held role that allows, in the order alice lists them; its
    first pair is the decision's ``held_role`` and ``rule`` (declared tools and GPU types alike)."""
    index = PolicyIndex(parse_policy(TWO_ROLES))
    through = index.allowed_through("alice", call)
    assert [(held, rule.role) for held, rule in through] == expected
    decision = index.evaluate("alice", call)
    if through:
        assert (decision.held_role, decision.rule) == through[0]
    else:
        assert decision.rule is None
    assert index.allowed_through("mallory", call) == ()


def test_explain_json_lists_every_role_that_allows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json`` carries the same: ``allowed_through``, each with the held role, the rule's role,
    the rule and the held role's budget; the first is the one that decided."""
    path = tmp_path / "two.yaml"
    path.write_text(TWO_ROLES, encoding="utf-8")
    base = ["policy", "explain", str(path), "--as", "alice", "--tool", "payments.refund", "--json", "--args"]
    assert main([*base, '{"amount": 20}']) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(t["held_role"], t["role"], t["budget"]) for t in out["allowed_through"]] == [
        ("clerk", "base", {"limit": 10, "unit": "calls"}),
        ("payer", "payer", {"limit": 1000000, "unit": "usd_micros"}),
    ]
    assert out["allowed_through"][0]["rule"] == out["rule"]
    assert main([*base, '{"amount": 800}']) == 1
    assert json.loads(capsys.readouterr().out)["allowed_through"] == []
