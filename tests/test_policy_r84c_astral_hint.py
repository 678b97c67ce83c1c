"""Review R84 (regression): the hint that writes a name that is not printable as a double-quoted
YAML key (``_yaml_key``: an argument declared by its type's name alone) wrote a character beyond
U+FFFF as JSON's surrogate pair escape (``\\ud83d\\ude00``), which libyaml refuses
(``ScannerError``: invalid Unicode character escape code) and PyYAML reads as two lone
surrogates, so the hint was no YAML that gives the name back. Such a character is now written as
itself where printable, else as YAML's ``\\UXXXXXXXX``; both parsers read the hint back to the
name (agentgate/policy/_load.py). The hint that writes a one-line capability as a mapping
(``_flow_mapping``) wrote its strings as JSON, the same surrogate pairs; it now quotes them as
``_yaml_key`` does (``_yaml_quoted``)."""

from __future__ import annotations

import re

import pytest
import yaml

from agentgate.capabilities import parse_capability
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy
from agentgate.policy._load import _flow_mapping, _yaml_key

LOADERS = [
    pytest.param(yaml.SafeLoader, id="pyyaml"),
    pytest.param(getattr(yaml, "CSafeLoader", None), id="libyaml"),
]
NAMES = [
    pytest.param("a\x00\U0001f600", id="printable-astral"),
    pytest.param("a\x00\U000e0001", id="astral-format-character"),
    pytest.param("\U000f0000\n", id="astral-private-use"),
    pytest.param("a\tb\u202e", id="basic-plane-only"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("loader", LOADERS)
def test_the_quoted_name_reads_back_as_the_name(loader: type[yaml.SafeLoader] | None, name: str) -> None:
    if loader is None:
        pytest.skip("PyYAML built without libyaml")
    assert yaml.load(_yaml_key(name), Loader=loader) == name  # until the fix: ScannerError, or surrogates


@pytest.mark.parametrize("loader", LOADERS)
def test_a_long_name_is_cut_between_whole_characters(loader: type[yaml.SafeLoader] | None) -> None:
    if loader is None:
        pytest.skip("PyYAML built without libyaml")
    name = "\x00" + "\U000e0001" * 200
    found = re.fullmatch(r'(".*")\.\.\. \((\d+) characters\)', _yaml_key(name))
    assert found is not None and int(found.group(2)) == len(name)
    written = yaml.load(found.group(1), Loader=loader)
    assert name.startswith(written) and 1 < len(written) < len(name)


def test_the_policy_hint_is_yaml_that_names_the_argument() -> None:
    text = 'version: 1\ntools:\n  t:\n    args:\n      ? "a\\0\\U0001F600"\n      : string\n'
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    hint = refused.value.hint
    assert hint is not None and hint.startswith("write ")
    assert yaml.safe_load(hint.removeprefix("write ")) == {"a\x00\U0001f600": {"type": "string"}}


@pytest.mark.parametrize(
    ("line", "constraints"),
    [
        pytest.param("tool:x?note=%F0%9F%98%80", {"note": {"eq": "\U0001f600"}}, id="eq"),
        pytest.param("tool:x?note=a|%F0%9F%98%80", {"note": {"in": ["a", "\U0001f600"]}}, id="one-of"),
    ],
)
@pytest.mark.parametrize("loader", LOADERS)
def test_the_flow_mapping_hint_reads_back_as_the_capability(
    loader: type[yaml.SafeLoader] | None, line: str, constraints: dict[str, object]
) -> None:
    if loader is None:
        pytest.skip("PyYAML built without libyaml")
    written = _flow_mapping(parse_capability(line))
    assert yaml.load(written, Loader=loader) == {"resource": "tool:x", "constraints": constraints}
