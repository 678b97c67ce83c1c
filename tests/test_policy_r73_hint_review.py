"""Review R73 (reviewer r73-rev-a) of the policy loader's newcomer hints: a duration's hint reads
the duration as the command line's ``--ttl`` does, and a capability's hint is given only where a
capability belongs."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

_HEAD = "version: 1\ntools:\n  t.x:\n    args: {a: {type: number}}\n"


def _hint(body: str) -> str:
    with pytest.raises(PolicyError) as refused:
        parse_policy(_HEAD + body, source="p.yaml")
    return refused.value.hint or ""


def test_a_lifetime_written_as_the_command_lines_sum_gets_its_seconds() -> None:
    """Review R73: ``--ttl 1h30m`` is a duration the command line takes (docs/cli.md); written as
    ``ttl_s: 1h30m`` its hint was "10:30 is text, not 630", the loader reading durations by a
    pattern of its own beside the command line's ``parse_duration``."""
    assert "ttl_s is whole seconds, 5400 for 1h30m" in _hint("roles:\n  r:\n    ttl_s: 1h30m\n")


@pytest.mark.parametrize("written", ["0h", "99999999999d", "3651d"])
def test_a_lifetime_out_of_range_is_not_told_seconds_the_policy_refuses(written: str) -> None:
    """Review R73: ``ttl_s: 0h`` was told "0 for 0h", and ``99999999999d`` a number above the ten
    years a policy holds: writing what the hint said is refused in turn. The hint says the range
    (since review R86 the field's own, in seconds)."""
    hint = _hint(f"roles:\n  r:\n    ttl_s: {written}\n")
    assert "ttl_s is whole seconds, more than 0 and at most 315360000 (" in hint, hint
    assert " for " + written not in hint, hint


def test_a_role_named_capabilities_is_not_told_to_write_a_capability() -> None:
    """Review R73: the capability hint matched any location whose last but one part is
    "capabilities", so a role named ``capabilities`` whose ``delegation`` was text was told to
    write a capability mapping there; only an item of a capabilities list is one."""
    hint = _hint("roles:\n  capabilities:\n    delegation: 'tool:t.x'\n")
    assert "resource" not in hint, hint
