"""Review R92: an explicit key with no value (``? ttl_s``) on the last line of a file without a
final line break had its null value located on a line past the end of the file with libyaml
(``p.yaml:5:1`` in a file of 4 lines), and at the text's end with PyYAML's own parser. Both parsers
now locate it at the text's end (agentgate/_yaml.py, ``_Builder.build``)."""

from __future__ import annotations

import pytest
from test_yaml import parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "path", "where"),
    [
        ("version: 1\nroles:\n  r:\n    ? ttl_s", ("roles", "r", "ttl_s"), (4, 12)),
        ("? x:e", ("x:e",), (1, 6)),
        ("a: 1\n? b", ("b",), (2, 4)),
    ],
)
def test_an_empty_value_at_the_end_of_the_text_is_located_at_its_end(
    text: str, path: tuple[str, ...], where: tuple[int, int]
) -> None:
    _, locations = load_yaml(text, source="p.yaml")
    mark = locations.of(path)
    assert mark is not None and (mark.line, mark.column) == where


@pytest.mark.usefixtures("parser")
def test_a_null_value_on_the_last_line_is_refused_within_the_file() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("version: 1\nroles:\n  r:\n    ? ttl_s", source="p.yaml")
    assert (info.value.line, info.value.column) == (4, 12), info.value


@pytest.mark.usefixtures("parser")
def test_a_version_key_without_a_value_is_refused_within_the_file() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("? version", source="p.yaml")
    assert (info.value.line, info.value.column) == (1, 10), info.value
