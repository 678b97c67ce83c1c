"""Declared names that read as one another (review R68).

Review R67 refused two principals whose names differ only in case. Names that differ in letters
a reader takes for one another (TR39's confusables: ``rn`` and ``m``, ``l``, ``I`` and ``1``,
``0`` and ``o``) loaded: principals ``mallory`` and ``rnallory``, tools ``payments.refund`` and
``payrnents.refund``. An approver shown one reads it as the other; for principals the Gate, which
compares an agent's name with them by how it reads, would take them for one. Each is refused at
load, at the later name, naming both."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import lint, parse_policy

POLICY = """\
version: 1
principals:
  {first}: {{kind: human, roles: [clerk]}}
  {second}: {{kind: agent, roles: [clerk]}}
tools:
  {tool1}: {{}}
  {tool2}: {{}}
models:
  {model1}: {{cost_per_mtok: {{input: 1, output: 1}}}}
  {model2}: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  {role1}:
    capabilities: [{{resource: tool:{tool1}}}]
  {role2}:
    capabilities: [{{resource: tool:{tool2}}}]
  clerk:
    capabilities: [{{resource: tool:{tool1}}}]
"""
PLAIN = {
    "first": "alice",
    "second": "bob",
    "tool1": "payments.refund",
    "tool2": "tickets.read",
    "model1": "small",
    "model2": "large",
    "role1": "reader",
    "role2": "writer",
}


@pytest.mark.parametrize(
    ("first", "second"), [("mallory", "rnallory"), ("bob1", "bobl"), ("b0b", "bob"), ("Ivy", "lvy")]
)
def test_principals_reading_alike_are_refused_at_load(first: str, second: str) -> None:
    """Review R68: two principals whose names read alike (their TR39 skeletons, case folded, are
    equal) loaded as two, and the Gate's table of how names read held one of them."""
    with pytest.raises(PolicyError) as refused:
        parse_policy(POLICY.format(**{**PLAIN, "first": first, "second": second}), source="team.yaml")
    error = refused.value
    assert (error.file, error.line) == ("team.yaml", 4)
    assert f"principals {second} and {first} read alike" in str(error)
    assert "rename one of them" in str(error)


@pytest.mark.parametrize(
    ("section", "fields", "line"),
    [
        ("tools", {"tool1": "payments.refund", "tool2": "payrnents.refund"}, 7),
        ("models", {"model1": "llama-3", "model2": "IIama-3"}, 10),
        ("roles", {"role1": "admin", "role2": "adrnin"}, 14),
    ],
)
def test_other_names_reading_alike_are_reported_by_lint(
    section: str, fields: dict[str, str], line: int
) -> None:
    """Review R68: tools ``payments.refund`` and ``payrnents.refund`` (models, roles) loaded and
    lint said nothing. Reported ``names_read_alike`` at the later name, naming both."""
    first, second = fields.values()
    policy = parse_policy(POLICY.format(**{**PLAIN, **fields}), source="team.yaml")
    found = [f for f in lint(policy) if f.code == "names_read_alike"]
    assert [(f.line, f.severity.value) for f in found] == [(line, "error")]
    assert f"{section} {second} and {first} read alike" in found[0].message
    assert not [f for f in lint(parse_policy(POLICY.format(**PLAIN))) if f.code == "names_read_alike"]


def test_names_that_read_apart_load() -> None:
    """Names a reader tells apart load as before."""
    policy = parse_policy(POLICY.format(**{**PLAIN, "second": "alice2"}))
    assert set(policy.principal_dids) == {"alice", "alice2"}


def test_names_differing_only_in_case_keep_their_message() -> None:
    """Review R67's message for principals differing only in case is kept."""
    with pytest.raises(PolicyError, match="principals Alice and alice differ only in case"):
        parse_policy(POLICY.format(**{**PLAIN, "second": "Alice"}))
