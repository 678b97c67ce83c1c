"""The argument names a policy declares for a tool (``tools.NAME.args`` keys) and those it marks
``loggable`` are bounded at ``MAX_NAME_LENGTH`` characters, as a constrained argument name and an
approval gate's ``when`` name are: a longer one is a ``PolicyError`` at its line."""

from __future__ import annotations

import pytest

from agentgate.capabilities import MAX_NAME_LENGTH
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

LONG = "a" * (MAX_NAME_LENGTH + 1)
FINE = "n" * MAX_NAME_LENGTH
HEAD = "version: 1\ntools:\n  t:\n"


def _refused(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    return refused.value


def test_a_declared_argument_name_over_the_bound_is_refused_at_its_key() -> None:
    """Review R57: a tool's declared argument name (tools.NAME.args key) had no length limit."""
    assert parse_policy(HEAD + f"    args:\n      {FINE}: {{type: string}}\n", source="p.yaml") is not None
    error = _refused(HEAD + f"    args:\n      n: {{type: string}}\n      {LONG}: {{type: integer}}\n")
    assert error.line == 6
    assert "tool t: argument name 'aaaa" in error.message
    assert "is 201 characters long, more than 200" in error.message
    assert len(error.message) < 300


def test_a_loggable_argument_name_over_the_bound_is_refused_at_its_line() -> None:
    """Review R57: a tool's loggable argument name had no length limit."""
    assert parse_policy(HEAD + f"    loggable:\n      - {FINE}\n", source="p.yaml") is not None
    error = _refused(HEAD + f"    loggable:\n      - n\n      - {LONG}\n")
    assert error.line == 6
    assert "tool t: loggable argument name 'aaaa" in error.message
    assert "is 201 characters long, more than 200" in error.message
    assert len(error.message) < 300


def test_declared_and_loggable_names_keep_any_text_within_the_bound() -> None:
    """Names are matched against a call's arguments as written: only their length is bounded."""
    policy = parse_policy(
        HEAD + "    args:\n      user-id: {type: string}\n    loggable: [user-id]\n", source="p.yaml"
    )
    assert list(policy.document.tools["t"].args) == ["user-id"]
    assert policy.document.tools["t"].loggable == ["user-id"]
