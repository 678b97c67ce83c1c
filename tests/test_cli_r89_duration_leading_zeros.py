"""Review R89: a DURATION whose number is padded past the grammar's 9 digits with leading zeros
(``--ttl 0000000001h``) was refused as "more than zero and at most 10 years", false for an hour.
The 9 digits hold (docs/cli.md, DURATION), as an AMOUNT's 19 do: such a duration is now refused
naming the leading zeros and the value to write, which is taken; one that is too long or zero
without them is still refused as such."""

from __future__ import annotations

import pytest
from _cli import cli

from agentgate._durations import parse_duration
from agentgate.errors import InputError


@pytest.mark.parametrize(
    ("padded", "meant", "seconds"),
    [("0000000001h", "1h", 3600), ("1h0000000030m", "1h30m", 5400), ("0" * 5000 + "7d", "7d", 604800)],
)
def test_a_duration_padded_with_zeros_is_told_the_value_to_write(
    padded: str, meant: str, seconds: int
) -> None:
    with pytest.raises(InputError) as refused:
        parse_duration(padded)
    message = str(refused.value)
    assert "10 years" not in message, message
    assert message.endswith(
        f"has a number of more than 9 digits, leading zeros included: write it without them, {meant}"
    )
    assert parse_duration(meant) == seconds


@pytest.mark.parametrize("value", ["0000000000h", "0000000004000d", "00000000001000000000s"])
def test_without_its_zeros_a_duration_out_of_range_is_refused_as_such(value: str) -> None:
    with pytest.raises(InputError, match=r"must be more than zero and at most 10 years"):
        parse_duration(value)


def test_store_prune_says_so_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "store", "prune", "--older-than", "0000000001h", "--store", "none.db")
    assert code == 2 and out == "", (code, out, err)
    assert err.splitlines()[-1].endswith("leading zeros included: write it without them, 1h"), err
