"""Review R86 (found fixing R86's YAML defects): libyaml refuses a ``%YAML`` version number of
more than nine digits, PyYAML's own parser reads it, ``%YAML 1.0000000002`` as 1.2: the file
loaded with PyYAML's own parser only. Past 4,300 digits Python refuses to convert it, and its
``ValueError`` came out bare from either parser (or, in a file under 16 KiB, was said to be an
escape beyond U+10FFFF). Now both refuse it at its tenth digit as a place the parsers disagree
on (agentgate/_yaml.py)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("%YAML 1.0000000002\n--- x\n", (1, 18)),
        ("%YAML 0000000001.2\n--- x\n", (1, 16)),
        ("%YAML 1." + "0" * 5000 + "2\n--- x\n", (1, 18)),  # past what Python converts
        ("%YAML 1." + "0" * 20_000 + "2\n--- x\n", (1, 18)),  # and past 16 KiB: its nodes counted first
        ("a: 1\n...\n%YAML 1." + "0" * 20_000 + "2\n--- x\n", (3, 18)),
    ],
)
def test_a_yaml_version_of_more_than_nine_digits_is_refused_by_both_parsers(
    text: str, where: tuple[int, int]
) -> None:
    error = _error(text)
    assert error.message.startswith("a %YAML directive's version number of more than nine digits")
    assert (error.line, error.column) == where
    assert len(str(error)) < 400


@pytest.mark.usefixtures("parser")
def test_a_version_of_nine_digits_still_loads() -> None:
    assert load_yaml("%YAML 1.000000002\n--- x\n", source="p.yaml")[0] == "x"
