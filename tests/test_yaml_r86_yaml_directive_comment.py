"""Review R86: a ``#`` right after a ``%YAML`` directive's version (``%YAML 1.2#note``) is a
comment to libyaml and refused by PyYAML's own parser: the same policy loaded or not with how
PyYAML was installed. It is now refused by both, at the '#' (agentgate/_yaml.py)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("%YAML 1.2#reviewed\n---\nversion: 1\n", (1, 10)),
        ("%YAML 1.2#\n---\na: 1\n", (1, 10)),
        ("%YAML  01.02#x\n--- a\n", (1, 13)),
        ("# header\n%YAML 1.2#x\n--- a\n\tb\n", (2, 10)),  # before the later tab, on either parser
        ("%YAML 1.1#x\n--- a\n", (1, 10)),
    ],
)
def test_a_hash_right_after_the_yaml_version_is_refused_by_both_parsers(
    text: str, where: tuple[int, int]
) -> None:
    error = _error(text)
    assert "'#' right after a %YAML directive's version" in error.message, error.message
    assert (error.line, error.column) == where


@pytest.mark.usefixtures("parser")
def test_a_comment_after_a_space_still_loads() -> None:
    assert load_yaml("%YAML 1.2 # reviewed\n---\na: 1\n", source="p.yaml")[0] == {"a": 1}
