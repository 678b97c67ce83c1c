"""Review R87: ``Budget.parse`` reads leading zeros (``007`` is 7) within the 19 digits an
amount is written in, leading zeros included (docs/cli.md, AMOUNT). A small value padded past
19 digits is refused saying that: how many digits it is written in, that at most 19 are read,
and the value to write instead. Until R87 the refusal said "(no leading zeros)", a rule that
``007`` showed was none."""

from __future__ import annotations

import pytest

from agentgate.authority import Budget
from agentgate.errors import TokenFormatError


@pytest.mark.parametrize(
    ("text", "amount"), [("007", 7), ("0" * 18 + "7", 7), ("0" * 19, 0), ("007:calls", 7)]
)
def test_leading_zeros_within_19_digits_are_read(text: str, amount: int) -> None:
    assert Budget.parse(text).amount == amount


@pytest.mark.parametrize(
    ("text", "digits", "value"),
    [("0" * 19 + "7", "20", "7"), ("0" * 20, "20", "0"), ("0" * 1000 + "500:calls", "1,003", "500:calls")],
)
def test_a_value_padded_past_19_digits_is_told_its_digit_count_not_a_leading_zero_rule(
    text: str, digits: str, value: str
) -> None:
    with pytest.raises(TokenFormatError) as raised:
        Budget.parse(text)
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
    assert str(raised.value) == (
        f"budget {shown}: the amount is written in {digits} digits, leading zeros included, and at "
        f"most 19 are read; write it without its leading zeros ({value})"
    )
