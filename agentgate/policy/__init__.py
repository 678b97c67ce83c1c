"""YAML authority policies: schema, line-accurate loading, evaluation index, lint, explain.

    policy = load_policy("policies/support.yaml")
    index = PolicyIndex(policy)
    decision = index.evaluate("support-agent", Call.tool("payments.refund", {"amount": 80}))
    findings = lint(policy)

With no policy at all, use ``Policy.deny_all()``: every call is denied.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
from typing import Any

from agentgate.findings import Outcome
from agentgate.policy import _schema
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
    """The JSON Schema of a policy file (draft 2020-12), for editors; each field's description is
    its docstring in ``_schema``, as Pydantic's ``use_attribute_docstrings`` would give it."""
    schema = PolicyDocument.model_json_schema(mode="validation")
    definitions = {PolicyDocument.__name__: schema, **schema["$defs"]}
    for model, docstrings in _field_docstrings().items():
        if not docstrings or model not in definitions:
            continue  # a class with no documented field, or not in the schema
        fields = getattr(_schema, model).model_fields
        properties = definitions[model]["properties"]
        for field, text in docstrings.items():
            if field in fields:
                properties[fields[field].alias or field].setdefault("description", text)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://agentgate.dev/schema/policy-v1.json",
        **schema,
    }


def _field_docstrings() -> dict[str, dict[str, str]]:
    """Each model of ``_schema`` with its fields' docstrings (the string right below a field), read
    from the module's source; none where the source is not installed (as Pydantic did: the schema
    without descriptions, not an error)."""
    try:
        source = inspect.getsource(_schema)
    except OSError:
        return {}
    found: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = {
                field.target.id: inspect.cleandoc(after.value.value)
                for field, after in itertools.pairwise(node.body)
                if isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            }
    return found


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
