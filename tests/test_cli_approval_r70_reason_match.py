"""``agentgate approval sign --store``: a reason the log keeps with placeholders is matched to the
reason shown without a backtracking regular expression (review R70, second reading)."""

from __future__ import annotations

import re

import pytest

from agentgate.cli.approval import _PLACEHOLDERS, _reason_recorded

RECORDED = "note=<not loggable> and memo=<not loggable> and ref=<not loggable> are not allowed"


@pytest.mark.timeout(60)  # a guard against the hang, not a measure: the match is one pass
def test_a_crafted_reason_is_refused_not_matched_for_hours() -> None:
    """Review R70: the recorded reason's placeholders became ``.*`` in a regular expression matched
    against the reason the payload shows, which the editor on the way writes: with three
    placeholders a shown reason of some 200 KB (the payload may hold 1 MiB) made the match
    backtrack cubically, and ``approval sign --store`` ran for hours instead of refusing."""
    shown = "note=" + " and memo=" * 10_000 + " and ref=" * 10_000
    assert not _reason_recorded(shown, RECORDED)


@pytest.mark.parametrize(
    ("shown", "recorded"),
    [
        ("note='a' and memo='b' and ref='c' are not allowed", RECORDED),
        ("note= and memo= and ref= are not allowed", RECORDED),
        ("note='x' and memo='y and memo=z' and ref=1 are not allowed", RECORDED),
        ("note='a' and memo='b' and ref='c' are allowed", RECORDED),
        ("note='a' and ref='c' are not allowed", RECORDED),
        ("a=a", "a=<not loggable>a"),
        ("a=", "a=<not loggable>a"),
        ("x", "<not loggable>"),
        ("", "<not loggable>"),
        ("<an undeclared argument name> is not declared", "<an undeclared argument name> is not declared"),
        ("'secret' is not declared", "<an undeclared argument name> is not declared"),
        ("'secret' is not declared!", "<an undeclared argument name> is not declared"),
        ("abc", "a<not loggable>b<not loggable>c"),
        ("ac", "a<not loggable>b<not loggable>c"),
    ],
)
def test_the_match_is_the_regular_expression_s(shown: str, recorded: str) -> None:
    """Review R70: the one-pass match answers as the regular expression did (each placeholder
    stands for any text) wherever that one finished."""
    parts = _PLACEHOLDERS.split(recorded)
    expected = shown == recorded or (
        len(parts) > 1 and re.fullmatch(".*".join(map(re.escape, parts)), shown, re.DOTALL) is not None
    )
    assert _reason_recorded(shown, recorded) is expected
