"""Underscores in numbers (agentgate/_yaml.py): YAML 1.1's ``1_000`` is kept, an underscore that
is not between two digits (a typo, almost surely) is refused at its line."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml


@pytest.mark.parametrize("number", ["1_", "1__0", "1_.5", "1.5_", "0xff_", "0b1__0", "-2_", "!!int 3_"])
def test_a_number_with_a_stray_underscore_is_refused_at_its_line(parser: str, number: str) -> None:  # noqa: F811
    """Review R57: `1_` read as 1 and `1__0` as 10 (YAML 1.1's leniency), a typo taken for a number."""
    error = _error(f"version: 1\nroles: {{}}\nlimit: {number}\n")
    assert (error.file, error.line, error.column) == ("p.yaml", 3, 8)
    assert "stray underscore" in error.message and error.hint


def test_underscores_between_digits_still_read(parser: str) -> None:  # noqa: F811
    data, _ = load_yaml("a: [1_000, -1_000_000, 1_000.5, 0x_ff, 0x1_F, 0b1_01]\n", source="p.yaml")
    assert data == {"a": [1000, -1_000_000, 1000.5, 255, 31, 5]}
