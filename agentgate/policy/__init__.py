"""YAML authority policies: schema, line-accurate loading, evaluation index, lint, explain.

    policy = load_policy("policies/support.yaml")
    index = PolicyIndex(policy)
    decision = index.evaluate("support-agent", Call.tool("payments.refund", {"amount": 80}))
    findings = lint(policy)

With no policy at all, use ``Policy.deny_all()``: every call is denied.
"""

from __future__ import annotations

import json
from typing import Any

from agentgate.findings import Outcome
from agentgate.policy._explain import explain
from agentgate.policy._index import (
    ApprovalRequirement,
    GrantTemplate,
    PolicyDecision,
    PolicyIndex,
    QuotaRef,
    role_grant_template,
)
from agentgate.policy._lint import RULES, LintRule, lint
from agentgate.policy._load import Policy, RuleRef, load_policy, parse_policy
from agentgate.policy._schema import SCHEMA_VERSION, Budget, PolicyDocument, Tool


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a policy file (draft 2020-12), for editors."""
    schema = PolicyDocument.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://agentgate.dev/schema/policy-v1.json",
        **schema,
    }


def json_schema_text() -> str:
    """``json_schema()`` as the text written to policies/policy.schema.json."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


__all__ = [
    "RULES",
    "SCHEMA_VERSION",
    "ApprovalRequirement",
    "Budget",
    "GrantTemplate",
    "LintRule",
    "Outcome",
    "Policy",
    "PolicyDecision",
    "PolicyDocument",
    "PolicyIndex",
    "QuotaRef",
    "RuleRef",
    "Tool",
    "explain",
    "json_schema",
    "json_schema_text",
    "lint",
    "load_policy",
    "parse_policy",
    "role_grant_template",
]
