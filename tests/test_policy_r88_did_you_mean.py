"""Review R88: an unknown field's "did you mean" is drawn from the fields of the section it is
written in, and "a field of another section" is said only where that section has no field close
to it. Until R88 the suggestion was drawn from every section's fields: a model's ``max_tokens:``
was told "did you mean 'max_ttl_s'?" (a settings field, refused there too), an argument's
``bogus:`` "did you mean 'gpus'?", and a principal's ``role:`` (for ``roles:``) or ``tenants:``
(for ``tenant:``) "a field of another section" instead of the field it misspells."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

HEAD = "version: 1\n"
MODEL = "models:\n  m:\n    cost_per_mtok: {input: 1, output: 1}\n"


def _hint(text: str) -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(HEAD + text, source="p.yaml")
    assert "unknown field" in str(caught.value), caught.value
    return caught.value.hint or ""


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ("principals:\n  p: {kind: human, role: [admin]}\n", "roles"),
        ("principals:\n  p: {kind: human, tenants: a}\n", "tenant"),
        ("roles:\n  r: {tll_s: 60}\n", "ttl_s"),
    ],
)
def test_a_misspelt_field_is_told_its_own_sections_field(text: str, meant: str) -> None:
    hint = _hint(text)
    assert hint == f"did you mean {meant!r}?", hint


@pytest.mark.parametrize(
    "text",
    [MODEL + "    max_tokens: 100\n", "tools:\n  t:\n    args:\n      a: {type: string, bogus: 1}\n"],
)
def test_no_field_of_another_section_is_suggested(text: str) -> None:
    hint = _hint(text)
    assert "did you mean" not in hint and "another section" not in hint, hint


def test_a_field_of_another_section_is_said_to_belong_elsewhere() -> None:
    assert "'max_ttl_s' is a field of another section" in _hint(MODEL + "    max_ttl_s: 100\n")
