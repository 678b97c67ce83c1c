"""Defects found in the policy language by review R56, each with the test that failed before its fix."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.mark.parametrize(
    ("value", "begins"),
    [
        ('"' + "x" * 10_000 + '"', "'xxx"),
        ("[" + ", ".join(["1"] * 2_000) + "]", "[1, 1, 1"),
        ("{" + ", ".join(f"k{i}: 1" for i in range(500)) + "}", "{'k0': 1, 'k1': 1"),
    ],
)
def test_an_unsupported_version_is_quoted_shortened_in_its_one_line_error(value: str, begins: str) -> None:
    """Review R56: a version written as 10 KB of text (or a list of 2,000 items) was quoted whole, a 10 KB error.

    Every other value or key an error quotes is shortened (``MAX_QUOTED``): the message says how
    the value begins and how long it is, at the version's line and column."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(f"version: {value}\n", source="v.yaml")
    error = caught.value
    assert (error.line, error.column) == (1, 10)
    assert error.message.startswith("unsupported or missing policy version " + begins)
    assert "characters)" in error.message and len(error.message) < 200
    assert len(str(error)) < 400 and "\n" not in str(error)
