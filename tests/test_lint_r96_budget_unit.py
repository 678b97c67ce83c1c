"""Review R96: a role's budget, or a delegation's, in a unit none of the calls it is charged for
cost limits nothing, and lint said nothing of it (``quota_counts_nothing`` looked at quotas only).

A tool call costs one call and nothing else (gate/_costs.py), so a tools-only role budgeted in
``usd_micros`` (the unit's default) or ``tokens`` spends without limit. policies/support.yaml did
exactly this (50,000,000 usd_micros on an agent with tool rules only: the demo's summary read
``0 of 50000000 usd_micros`` after five allowed calls). ``budget_counts_nothing`` now reports it,
with the same cost model as the quota rule, and the policy budgets ``calls``.

Real components: the Gate over a SQLite store, the policy loaded by ``parse_policy``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import lint, load_policy, parse_policy
from agentgate.store import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent
KEYS = {name: SigningKey.generate() for name in ("root", "agent")}


def _policy(unit: str, *, capabilities: str = "[{resource: tool:tickets.read}]", extra: str = "") -> str:
    return f"""version: 1
trust_anchors:
  root: {{did: "{KEYS["root"].did}"}}
principals:
  agent: {{kind: agent, did: "{KEYS["agent"].did}", roles: [clerk]}}
tools:
  tickets.read: {{args: {{id: {{type: string}}}}}}
models:
  small: {{cost_per_mtok: {{input: 100, output: 200}}}}
gpus:
  a100: {{cost_per_gpu_hour: 2000000}}
  free: {{cost_per_gpu_hour: 0}}
roles:
  clerk:
    kind: agent
    capabilities: {capabilities}
    budget: {{limit: 2, unit: {unit}}}
    ttl_s: 600
{extra}"""


def _found(text: str) -> list[tuple[str, int | None]]:
    return [
        (f.message, f.line)
        for f in lint(parse_policy(text, source="p.yaml"))
        if f.code == "budget_counts_nothing"
    ]


@pytest.mark.parametrize("unit", ["tokens", "usd_micros"])
def test_a_tools_only_role_budgeted_in_a_unit_tools_never_cost_is_an_error(unit: str) -> None:
    text = _policy(unit)
    findings = [f for f in lint(parse_policy(text, source="p.yaml")) if f.code == "budget_counts_nothing"]
    assert len(findings) == 1 and findings[0].severity.value == "error"
    assert findings[0].message == (
        f"role clerk's budget is in {unit}, which no call its rules allow (tool:tickets.read) costs: "
        "it limits nothing, and the grants it bounds spend without limit"
    )
    assert findings[0].line == text.splitlines().index(f"    budget: {{limit: 2, unit: {unit}}}") + 1


@pytest.mark.parametrize("unit", ["tokens", "usd_micros"])
def test_the_budget_it_reports_is_one_the_gate_never_charges(unit: str, tmp_path: Path) -> None:
    """What the finding says, as the Gate does it: five calls on a budget of 2 all pass."""
    with Gate(parse_policy(_policy(unit), source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        ident = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="clerk")
        verdicts = [gate.authorize(ident, Call.tool("tickets.read", {"id": "1"})).verdict for _ in range(5)]
    assert verdicts == ["allow"] * 5


@pytest.mark.parametrize(
    ("unit", "capabilities"),
    [
        ("calls", "[{resource: tool:tickets.read}]"),
        ("tokens", "[{resource: tool:tickets.read}, {resource: model:small}]"),
        ("usd_micros", "[{resource: tool:tickets.read}, {resource: 'model:*'}]"),
        ("usd_micros", "[{resource: gpu:a100}]"),
        ("usd_micros", "[{resource: 'gpu:*'}]"),
    ],
)
def test_a_budget_some_call_of_the_role_costs_is_not_reported(unit: str, capabilities: str) -> None:
    assert _found(_policy(unit, capabilities=capabilities)) == []


def test_an_unpriced_gpu_costs_no_money() -> None:
    assert [m for m, _ in _found(_policy("usd_micros", capabilities="[{resource: gpu:free}]"))] == [
        "role clerk's budget is in usd_micros, which no call its rules allow (gpu:free) costs: "
        "it limits nothing, and the grants it bounds spend without limit"
    ]


def test_inherited_rules_count_as_the_role_s_own() -> None:
    """A call allowed by an inherited rule is decided as, and charged to, the held role."""
    extra = "  model-user:\n    kind: agent\n    capabilities: [{resource: model:small}]\n"
    text = _policy("tokens", extra=extra).replace(
        "    kind: agent\n    capabilities: [{resource: tool:t",
        "    kind: agent\n    inherits: [model-user]\n    capabilities: [{resource: tool:t",
        1,
    )
    assert "inherits: [model-user]" in text
    assert _found(text) == []


def test_a_delegation_budget_is_held_to_what_the_delegation_hands_on() -> None:
    delegation = (
        "    delegation:\n      max_depth: 1\n      max_ttl_s: 60\n      budget: {limit: 1, unit: tokens}\n"
        "      capabilities: [{resource: tool:tickets.read}]\n"
    )
    text = _policy("calls", capabilities="[{resource: tool:tickets.read}, {resource: model:small}]")
    text = text.replace("    ttl_s: 600\n", "    ttl_s: 600\n" + delegation)
    assert _found(text) == [
        (
            "role clerk's delegation budget is in tokens, which no call it may delegate "
            "(tool:tickets.read) costs: it limits nothing, and the grants it bounds spend without limit",
            text.splitlines().index("      budget: {limit: 1, unit: tokens}") + 1,
        )
    ]
    assert (
        _found(
            text.replace(
                "      capabilities: [{resource: tool:tickets.read}]\n",
                "      capabilities: [{resource: model:small}]\n",
            )
        )
        == []
    )


def test_the_project_s_own_support_policy_lints_clean_and_budgets_calls() -> None:
    policy = load_policy(ROOT / "policies" / "support.yaml")
    assert lint(policy) == ()
    budget = policy.document.roles["support-agent"].budget
    assert budget is not None and budget.unit == "calls"
