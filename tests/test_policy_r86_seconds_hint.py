"""Review R86: the hint for a duration written with a unit in a field of seconds is built from
that field's own bounds and kind. Where the field takes the duration's seconds, the hint gives
them; where it does not, it gives the field's bounds and what the duration is in seconds. Until
R86 every field was told a lifetime's range: ``backoff_max_s: 2d`` was told to write 172800,
which the field then refused (at most 86400), ``timeout_s: 11000d``, which it takes, that it was
more than 10 years, and a float field was called "whole seconds"."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

_HEAD = "version: 1\nprincipals:\n  alice: {kind: human, roles: []}\ntools:\n"


def _hint(body: str) -> str:
    with pytest.raises(PolicyError) as refused:
        parse_policy(_HEAD + body, source="p.yaml")
    return refused.value.hint or ""


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            "  t: {retry: {backoff_max_s: 2d}}\n",
            "backoff_max_s is seconds, at least 0 and at most 86400 (2d is 172800)",
        ),
        ("  t: {timeout_s: 0s}\n", "timeout_s is seconds, more than 0 (0s is 0)"),
        (
            "  t: {}\nroles:\n  r: {ttl_s: 3651d}\n",
            "ttl_s is whole seconds, more than 0 and at most 315360000 (3651d is 315446400)",
        ),
    ],
)
def test_a_duration_the_field_refuses_is_told_the_fields_bounds(body: str, said: str) -> None:
    hint = _hint(body)
    assert hint == f"write a plain number, without a unit: {said}", hint


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("  t: {retry: {backoff_initial_s: 1h30m}}\n", "backoff_initial_s is seconds, 5400 for 1h30m"),
        ("  t: {timeout_s: 11000d}\n", "timeout_s is seconds, 950400000 for 11000d"),
        ("  t: {}\nquotas:\n  q: {window_s: 1h, limit: 3}\n", "window_s is whole seconds, 3600 for 1h"),
    ],
)
def test_a_duration_the_field_takes_gets_its_seconds(body: str, said: str) -> None:
    assert _hint(body) == f"write a plain number, without a unit: {said}"


def test_following_the_hint_loads() -> None:
    """What a hint says to write is what the field takes."""
    assert "950400000 for 11000d" in _hint("  t: {timeout_s: 11000d}\n")
    policy = parse_policy(_HEAD + "  t: {timeout_s: 950400000}\n", source="p.yaml")
    assert policy.document.tools["t"].timeout_s == 950400000


def test_a_malformed_duration_is_told_the_fields_bounds_and_why() -> None:
    hint = _hint("  t: {retry: {backoff_max_s: 1h1h}}\n")
    assert hint.startswith(
        "write a plain number, without a unit: backoff_max_s is seconds, at least 0 and at most 86400; "
    )
    assert "the unit h comes more than once" in hint and "10 years" not in hint
