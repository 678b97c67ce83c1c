"""Lint: the examples are clean, every rule reports located, fixable findings of its own kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.findings import FindingKind, Severity
from agentgate.policy import RULES, lint, load_policy, parse_policy

POLICIES = Path(__file__).resolve().parents[1] / "policies"
DID = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"


@pytest.mark.parametrize("name", ["support.yaml", "research_team.yaml", "gpu_platform.yaml"])
def test_examples_lint_clean(name: str) -> None:
    assert lint(load_policy(POLICIES / name)) == ()


def test_rules_have_unique_codes_and_cover_the_four_kinds() -> None:
    codes = [rule.code for rule in RULES]
    assert len(codes) == len(set(codes))
    assert {rule.kind for rule in RULES} == set(FindingKind)
    assert all(rule.hint for rule in RULES)


def test_docs_explain_every_code() -> None:
    text = (POLICIES.parent / "docs" / "lint.md").read_text()
    missing = [rule.code for rule in RULES if f"`{rule.code}`" not in text]
    assert not missing


def test_finding_names_file_line_and_fix() -> None:
    text = f"""version: 1
principals:
  bot: {{kind: agent, did: {DID}, roles: [worker]}}
tools:
  payments.refund: {{args: {{amount: {{type: number}}}}}}
roles:
  worker:
    capabilities:
      - resource: tool:payments.refund
        constraints: {{amount: {{le: 100}}}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      capabilities:
        - resource: tool:payments.refund
          constraints: {{amount: {{le: 1000}}}}
"""
    (finding,) = lint(parse_policy(text, source="p.yaml"))
    assert finding.kind is FindingKind.SCOPE_CREEP and finding.code == "delegation_wider_than_role"
    assert (finding.file, finding.line) == ("p.yaml", 16) and finding.hint
    assert finding.severity is Severity.ERROR
    assert "amount" in finding.message  # the witness: a call the child allows and the role does not


def test_the_typo_that_other_tools_miss_is_an_error() -> None:
    # A misspelled argument makes a rule that never matches; it must not load silently and lint clean.
    text = f"""version: 1
principals:
  bot: {{kind: agent, did: {DID}, roles: [worker]}}
tools:
  run_shell: {{args: {{cmd: {{type: string}}}}}}
roles:
  worker:
    capabilities:
      - resource: tool:run_shell
        constraints: {{comand: {{prefix: "ls "}}}}
    ttl_s: 600
"""
    codes = {f.code: f.severity for f in lint(parse_policy(text, source="p.yaml"))}
    assert codes == {"constraint_on_undeclared_argument": Severity.ERROR}


def _big_policy(n: int) -> str:
    tools = "".join(f"  t{i}.run: {{args: {{amount: {{type: number}}}}}}\n" for i in range(n))
    rules = "".join(
        f"      - {{resource: 'tool:t{i}.run', constraints: {{amount: {{le: {i + 1}}}}}}}\n" for i in range(n)
    )
    return (
        f"version: 1\nprincipals:\n  svc: {{kind: service, did: {DID}, roles: [r]}}\n"
        f"tools:\n{tools}roles:\n  r:\n    ttl_s: 600\n    capabilities:\n{rules}"
    )


def test_large_policy_lints_clean_and_finds_a_planted_shadow() -> None:
    text = _big_policy(1000)
    assert lint(parse_policy(text)) == ()
    planted = text + "      - {resource: 'tool:t5.run', constraints: {amount: {le: 1}}}\n"
    assert [f.code for f in lint(parse_policy(planted))] == ["shadowed_rule"]
