"""Review R88d: the benchmarks' whole-number options (``benchmarks/_args.py``) read off leading
zeros of ASCII digits only, then gave the text to ``int``, which reads other scripts' digits and
``_`` between digits too: ``1_000`` and Arabic-Indic ``\\u0663`` were taken, and past 4,300 of
them (4,400 Arabic-Indic zeros then 8) refused as "not a whole number" whatever they said. A
whole number is ASCII digits now, as on the command line: the others are refused saying so; a
sign is read as before (``-1`` refused by the least taken)."""

from __future__ import annotations

import argparse

import pytest
from test_benchmarks_r57_contract import _load

ARGS = _load("_args")
SAYS = r"^not a whole number in ASCII digits \(0-9, no '_'\): "


@pytest.mark.parametrize(
    "text",
    ["1_000", "\u0663", "\u0660" * 4400 + "8", "0_" * 4400 + "8", "1_" * 5000 + "1", "\u0661" * 5000, "-1_0"],
    ids=[
        "underscore",
        "arabic-indic",
        "arabic-indic-zeros",
        "underscore-zeros",
        "long-underscores",
        "long-arabic",
        "signed",
    ],
)
def test_digits_other_than_ascii_are_refused_saying_so(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=SAYS) as refused:
        ARGS.positive_int(text)
    assert len(str(refused.value)) < 150
    with pytest.raises(argparse.ArgumentTypeError, match=SAYS):
        ARGS.whole_up_to(1, 1024, "simulated backends")(text)


@pytest.mark.parametrize(("text", "value"), [("8", 8), (" +007 ", 7), ("0" * 4400 + "8", 8)])
def test_ascii_digits_are_still_read(text: str, value: int) -> None:
    assert ARGS.positive_int(text) == value


@pytest.mark.parametrize("text", ["-1", "-0", "0"])
def test_a_number_below_the_least_is_refused_by_it(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be at least 1: "):
        ARGS.positive_int(text)


@pytest.mark.parametrize("text", ["x", "", "1.5", "_", "+", "1 000"])
def test_text_that_is_no_number_is_refused_as_such(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^not a whole number: "):
        ARGS.positive_int(text)
