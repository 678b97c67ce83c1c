"""docs/policy-reference.md's YAML examples run through ``agentgate policy lint``, as a reader runs
them, and each lint finding the page names for a field checked on those examples.

tests/test_policy_reference_spec.py loads the examples together with the parser and checks what
they decide; no test ran lint on them, nor the page's "``X`` is a lint error (``code``)" claims on
the policy its examples make. Review R63 ran them by hand: they hold; these tests keep them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_policy_reference_spec import reference_examples

from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "policy-reference.md").read_text(encoding="utf-8")


def _lint(tmp_path: Path, doc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    keys = tmp_path / "keys"
    if not keys.exists():
        for name in ("ops-root", "support-agent"):
            save_key(SigningKey.generate(), keys, name)
    path = tmp_path / "policy.yaml"
    path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    capsys.readouterr()
    code = main(["policy", "lint", "--json", str(path)])
    return code, json.loads(capsys.readouterr().out)


def test_the_examples_together_lint_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R63: the page's examples, put together as its closing sentence of "Top level" says,
    load with ``agentgate policy lint`` and give no finding at all (exit 0)."""
    assert "put together, with `bob`" in " ".join(PAGE.split())
    code, report = _lint(tmp_path, reference_examples(), capsys)
    assert (code, report["valid"], report["findings"]) == (0, True, [])


Change = Callable[[dict[str, Any]], None]


def _set(*path_and_value: Any) -> Change:
    *parents, last, value = path_and_value

    def change(doc: dict[str, Any]) -> None:
        node = doc
        for part in parents:
            node = node[part]
        node[last] = value

    return change


def _append(*path_and_value: Any) -> Change:
    *path, value = path_and_value

    def change(doc: dict[str, Any]) -> None:
        node: Any = doc
        for part in path:
            node = node[part]
        node.append(value)

    return change


# (what the page says, the change to its examples, the finding's code, its severity)
_CLAIMS = [
    (
        "`false` is a lint error (`revocation_disabled`)",
        _set("settings", "revocation", False),
        "revocation_disabled",
        "error",
    ),
    (
        "An anchor with neither is a lint error (`trust_anchor_without_key`)",
        _set("trust_anchors", "x", {"description": "none"}),
        "trust_anchor_without_key",
        "error",
    ),
    (
        "One without a key is a lint error (`principal_without_key`)",
        _set("principals", "carol", {"kind": "human"}),
        "principal_without_key",
        "error",
    ),
    (
        "an error for an agent holding a `kind: human`",
        _append("principals", "support-agent", "roles", "support-lead"),
        "role_kind_mismatch",
        "error",
    ),
    (
        "`false` is a lint error (`tool_not_audited`)",
        _set("tools", "payments.refund", "audit", False),
        "tool_not_audited",
        "error",
    ),
    (
        "an agent role that inherits is a lint error",
        _set("roles", "support-agent", "inherits", ["support-lead"]),
        "agent_inherits_role",
        "error",
    ),
    (
        "the delegator's grant: a lint error (`sub_agent_shares_grant`)",
        _set("roles", "support-agent", "delegation", "share_grant", True),
        "sub_agent_shares_grant",
        "error",
    ),
    (
        "| `revocable` | boolean | `true` | `false` is a lint error",
        _set("roles", "support-agent", "revocable", False),
        "revocation_disabled",
        "error",
    ),
    (
        "an agent (`kind: agent`) named here is a lint error (`agent_approves`)",
        _append("approvals", "large-refund", "approvers", "support-agent"),
        "agent_approves",
        "error",
    ),
    (
        "a lint warning, `approver_listed_twice`",
        _append("approvals", "large-refund", "approvers", "bob"),
        "approver_listed_twice",
        "warning",
    ),
    (
        "a `tokens` or `usd_micros` quota on tools\ncounts nothing (lint: `quota_counts_nothing`)",
        _set(
            "quotas",
            "q",
            {
                "principal": "support-agent",
                "window_s": 60,
                "limit": 5,
                "unit": "tokens",
                "resources": ["tool:*"],
            },
        ),
        "quota_counts_nothing",
        "error",
    ),
]


@pytest.mark.parametrize(
    ("said", "change", "code", "severity"), _CLAIMS, ids=[c[2] + "-" + str(i) for i, c in enumerate(_CLAIMS)]
)
def test_each_lint_finding_the_page_names_is_what_lint_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], said: str, change: Change, code: str, severity: str
) -> None:
    """Review R63: each field the page says lint reports, set on the page's own examples, gives
    exactly that one finding with the severity the page (and docs/lint.md) gives it."""
    assert " ".join(said.split()) in " ".join(PAGE.split()), said
    doc = reference_examples()
    change(doc)
    exit_code, report = _lint(tmp_path, doc, capsys)
    found = [(f["code"], f["severity"]) for f in report["findings"]]
    assert found == [(code, severity)], found
    assert exit_code == (1 if severity == "error" else 0)
