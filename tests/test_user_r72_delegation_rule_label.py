"""Lint's words for a role's delegation rule (agentgate/policy/_load.py, ``RuleRef``), found by
following docs/policy-reference.md as a newcomer in review R72."""

from __future__ import annotations

from agentgate.policy import lint, parse_policy

POLICY = """\
version: 1
tools:
  docs.write:
    args: {path: {type: string, required: true}}
roles:
  lead:
    capabilities:
      - resource: tool:docs.write
        constraints: {path: {prefix: "reports/"}}
    ttl_s: 3600
    delegation:
      capabilities:
        - resource: tool:docs.write
          constraints: {pth: {prefix: "reports/drafts/"}}
"""


def test_a_delegation_rule_is_named_as_one_in_lint_findings() -> None:
    """Review R72: a delegation rule that constrains an argument the tool does not declare (``pth``
    for ``path``) was reported as ``role lead rule 1: ... (line 13)``, the words that name the
    role's own first capability (line 8), so a reader looked for the typo in the wrong list. It is
    ``role lead delegation rule 1``, as the loader's errors already call it."""
    findings = [f for f in lint(parse_policy(POLICY)) if f.code == "constraint_on_undeclared_argument"]
    assert len(findings) == 1
    assert findings[0].message.startswith("role lead delegation rule 1: tool:docs.write where pth"), findings[
        0
    ].message
    assert findings[0].line == 13
