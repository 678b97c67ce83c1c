"""Review R88: ``tasks dead-letters --limit`` checked the length of its value with the leading
zeros read off, then gave the whole text to ``int``, which refuses more than 4,300 digits, zeros
included: 4,300 zeros then 5 was argparse's bare 'invalid _positive value' instead of 5 (or the
range refusal). The zeros are now read off before ``int``."""

from __future__ import annotations

import argparse

import pytest

from agentgate.cli._tasks_parser import MAX_LIMIT, _positive


def test_a_limit_after_thousands_of_leading_zeros_is_read_as_its_digits() -> None:
    assert _positive("0" * 4_300 + "5") == 5
    assert _positive("007") == 7


def test_a_limit_of_zeros_alone_or_past_the_range_after_zeros_is_refused_by_the_range() -> None:
    for text in ("0" * 5_000, "0" * 4_300 + str(MAX_LIMIT + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected an integer from 1 to {MAX_LIMIT}"):
            _positive(text)
