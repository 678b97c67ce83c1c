"""The seconds hint quotes a duration the command line reads (review R91).

A unit in a field of seconds is refused with the seconds to write, "read as the command line
reads it" (docs/policy-reference.md, Units and names). The hint left blanks out before reading
the duration, and quoted it as written: ``ttl_s: '1h 30m'`` was told "5400 for 1h 30m" and
``'1 h'`` "3600 for 1 h", durations the command line's ``--ttl`` refuses. The duration is now
quoted as the command line reads it, blanks left out."""

from __future__ import annotations

import pytest

from agentgate._durations import parse_duration
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


def _hint(ttl: str) -> str:
    with pytest.raises(PolicyError) as refused:
        parse_policy(f"version: 1\nroles:\n  r: {{ttl_s: '{ttl}'}}\n")
    assert refused.value.hint is not None
    return refused.value.hint


@pytest.mark.parametrize(
    ("written", "read", "seconds"),
    [
        ("1h 30m", "1h30m", 5400),
        ("1 h", "1h", 3600),
        ("1h\n\n    30m", "1h30m", 5400),
        ("1h30m", "1h30m", 5400),
    ],
)
def test_the_duration_quoted_is_one_the_command_line_reads(written: str, read: str, seconds: int) -> None:
    hint = _hint(written)
    assert hint.endswith(f"ttl_s is whole seconds, {seconds} for {read}"), hint
    assert parse_duration(read) == seconds


def test_a_duration_outside_the_fields_bounds_is_quoted_so_too() -> None:
    """Where the field does not take that many seconds, the duration is quoted the same way."""
    with pytest.raises(PolicyError) as refused:
        parse_policy("version: 1\ntools:\n  t.x:\n    retry: {backoff_max_s: '2 d'}\n")
    assert refused.value.hint is not None
    assert refused.value.hint.endswith("(2d is 172800)"), refused.value.hint
