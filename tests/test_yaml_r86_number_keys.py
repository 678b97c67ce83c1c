"""Review R86: a mapping key is read as a value is, as YAML 1.2 reads it. ``1:`` and ``0x1F:``
were refused as keys that are not text, while ``1e3:``, ``0o17:``, ``-.5:`` and ``1.5e3:``, which
YAML 1.2 reads as numbers (and agentgate does as values: 1000.0, 15, -0.5), loaded as the text
keys PyYAML's YAML 1.1 rule reads; they are now refused alike (agentgate/_yaml.py)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("1e3: x\n", (1, 1)),
        ("0o17: x\n", (1, 1)),
        ("-.5: x\n", (1, 1)),
        ("1.5e3: x\n", (1, 1)),
        ("a:\n  b: 1\n  +1E-3: 2\n", (3, 3)),
        ("{a: 1, 1e3: x}\n", (1, 8)),
        ("? 0o17\n: x\n", (1, 3)),
        ("a: &k 1e3\nb: {*k : x}\n", (2, 5)),  # an alias of a number as a key, located at the alias
    ],
)
def test_a_key_yaml_1_2_reads_as_a_number_is_refused(text: str, at: tuple[int, int]) -> None:
    error = _error(text)
    assert error.message == "mapping keys must be plain strings", error.message
    assert (error.line, error.column) == at


@pytest.mark.usefixtures("parser")
def test_a_key_with_a_leading_zero_is_refused_as_ambiguous_as_a_value_is() -> None:
    error = _error("a: 1\n09: x\n")
    assert error.message == "ambiguous number '09'" and (error.line, error.column) == (2, 1)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("key", ["'1e3'", '"0o17"', "!!str -.5", "! 1.5e3", "1e3x", "e3", "0o"])
def test_a_key_written_as_text_still_loads(key: str) -> None:
    data, _ = load_yaml(f"{key}: x\n", source="p.yaml")
    assert list(data) == [key.strip("'\"").removeprefix("!!str ").removeprefix("! ")]
