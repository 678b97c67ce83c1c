"""Review R88c: the benchmarks' whole-number options (``benchmarks/_args.py``) read their text with
``int`` as given, which refuses more than 4,300 digits: ``--backends`` of 4,400 zeros then 8 was
refused as "not a whole number". Leading zeros are read off first now, however many there are,
as the examples read a count; a number of more than 4,300 significant digits is refused as too
large (or as below the least taken, when negative), never as no number."""

from __future__ import annotations

import argparse

import pytest
from test_benchmarks_r57_contract import _load

ARGS = _load("_args")
ZEROS = "0" * 4400


@pytest.mark.parametrize(
    ("text", "value"),
    [(ZEROS + "8", 8), ("+" + ZEROS + "5", 5), (" 007 ", 7), (ZEROS + "1", 1)],
)
def test_leading_zeros_are_read_off_however_many(text: str, value: int) -> None:
    assert ARGS.positive_int(text) == value


def test_a_pool_of_many_leading_zeros_is_within_its_bound() -> None:
    assert ARGS.whole_up_to(1, 1024, "simulated backends")(ZEROS + "8") == 8
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be 1 or more and 1,024 or less"):
        ARGS.whole_up_to(1, 1024, "simulated backends")(ZEROS + "2000")


def test_too_many_significant_digits_are_too_large_not_no_number() -> None:
    with pytest.raises(
        argparse.ArgumentTypeError, match=r"^too large: a whole number of 5,000 digits: '9{20}"
    ):
        ARGS.positive_int("9" * 5000)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be at least 1: '-9"):
        ARGS.positive_int("-" + "9" * 5000)


@pytest.mark.parametrize("text", ["x", "", "1.5", ZEROS + "x"])
def test_text_that_is_no_whole_number_is_still_refused_as_such(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^not a whole number: "):
        ARGS.positive_int(text)
