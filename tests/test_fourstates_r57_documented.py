"""Every finding code the code can emit is documented under its kind, and every documented code is
emitted (review R57): test_authority_findings_documented checks the codes a few scenarios reach;
this reads every place in agentgate/ that builds a finding, so a code added without its line in
docs/concepts.md (or docs/lint.md, for lint rules) fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_authority_findings_documented import _documented_kinds

from agentgate.findings import FindingKind
from agentgate.policy._lint import RULES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentgate"
_KINDS = {
    "_SCOPE": FindingKind.SCOPE_CREEP,
    "_TRUST": FindingKind.IMPLICIT_TRUST_INHERITANCE,
    "_REVOCABLE": FindingKind.NON_REVOCABLE_GRANT,
    "_OPACITY": FindingKind.AUTHORITY_CHAIN_OPACITY,
    **{f"FindingKind.{k.name}": k for k in FindingKind},
}


def _kind(node: ast.expr | None) -> FindingKind | None:
    return _KINDS.get(ast.unparse(node)) if node is not None else None


def _text(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _emitted() -> set[tuple[str, FindingKind]]:
    """(code, kind) of every finding built with a literal code outside the linter: the helpers
    ``_finding(kind, code, ...)`` and ``_f(kind, code, ...)``, ``Finding(kind=..., code=...)``,
    the Gate's delegation-rule ``refuse(code, message, kind=scope_creep)`` and the gateway's
    ``self.refuse(call, status, code, reason)`` (authority_chain_opacity)."""
    found: set[tuple[str, FindingKind]] = set()
    for path in PACKAGE.rglob("*.py"):
        if "_lint" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            name = ast.unparse(node.func)
            args = node.args
            code: str | None = None
            kind: FindingKind | None = None
            if name in ("_finding", "_f") and len(args) >= 2:
                kind, code = _kind(args[0]), _text(args[1])
            elif name == "Finding":
                kind, code = _kind(keywords.get("kind")), _text(keywords.get("code"))
            elif name == "refuse" and args:
                kind = _kind(args[2]) if len(args) > 2 else FindingKind.SCOPE_CREEP
                code = _text(args[0])
            elif name == "self.refuse" and len(args) == 4:
                kind, code = FindingKind.AUTHORITY_CHAIN_OPACITY, _text(args[2])
            if code is not None:
                assert kind is not None, (
                    f"{path}:{node.lineno}: {code} built with a kind this test cannot read"
                )
                found.add((code, kind))
    return found


def test_every_code_the_code_emits_is_in_the_concepts_table_under_its_kind() -> None:
    """Review R57: the documented-codes test checked only the codes its scenarios reached."""
    emitted = _emitted()
    assert len(emitted) >= 40  # the scan reads the finding sites, not nothing
    documented = _documented_kinds()
    wrong = sorted(
        f"{code}: emitted as {kind.value}, documented as {documented.get(code)}"
        for code, kind in emitted
        if documented.get(code) != kind.value
    )
    assert not wrong


def test_every_code_the_concepts_table_lists_is_emitted() -> None:
    emitted = {code for code, _kind in _emitted()}
    # The table's "a delegation the policy's `delegation` rule does not allow" names the rule.
    listed = set(_documented_kinds()) - {"delegation"}
    assert not sorted(listed - emitted)


def test_each_lint_rule_is_documented_in_its_kinds_section_with_its_severity() -> None:
    """Review R57: docs/lint.md was checked to name each code, not where nor how severe."""
    section: str | None = None
    where: dict[str, tuple[str | None, str]] = {}
    for line in (ROOT / "docs" / "lint.md").read_text().splitlines():
        heading = re.match(r"## ([a-z_]+):", line)
        if heading:
            section = heading.group(1)
        rule = re.match(r"### `([a-z_]+)` \(([^)]*)\)", line)
        if rule:
            where[rule.group(1)] = (section, rule.group(2))
    assert set(where) == {rule.code for rule in RULES}
    for rule in RULES:
        kind, severity = where[rule.code]
        assert kind == rule.kind.value, rule.code
        assert severity.startswith(rule.severity.value), rule.code
