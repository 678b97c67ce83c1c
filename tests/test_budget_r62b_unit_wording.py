"""A budget unit that is no unit name (``Budget`` in agentgate/authority/_grant.py) is refused in
words a person reads, the value quoted bounded.

Until review R62 the error showed a regular expression (``must match [a-z][a-z0-9_]{0,31}``) and
quoted the unit whole: one of 100,000 characters made a 100,000-character error."""

from __future__ import annotations

import pytest

from agentgate.authority import Budget
from agentgate.errors import TokenFormatError

RULE = "a lowercase letter first, then lowercase letters, digits or '_', at most 32 characters"


@pytest.mark.parametrize("unit", ["USD", "calls ", "tokens:x", "1calls", "", "a" * 33, "é"])
def test_a_unit_that_is_no_unit_name_is_refused_in_words(unit: str) -> None:
    """Review R62: the rule is said in words, with the unit quoted, no regular expression."""
    with pytest.raises(TokenFormatError) as caught:
        Budget(5, unit)
    message = str(caught.value)
    assert f"budget unit {unit[:40]!r}" in message and RULE in message, message
    assert "[a-z]" not in message


def test_a_huge_unit_is_quoted_bounded() -> None:
    """Review R62: a unit of 100,000 characters is quoted by its first 40 and its length."""
    with pytest.raises(TokenFormatError) as caught:
        Budget(5, "X" * 100_000)
    message = str(caught.value)
    assert len(message) < 300 and f"{'X' * 40!r}... (100000 characters)" in message, message


def test_a_huge_unit_typed_after_an_amount_is_quoted_bounded() -> None:
    """Review R62: ``Budget.parse`` of ``5:`` and 100,000 characters says so in a bounded line."""
    with pytest.raises(TokenFormatError) as caught:
        Budget.parse("5:" + "Y" * 100_000)
    assert len(str(caught.value)) < 300 and RULE in str(caught.value)


def test_a_unit_that_is_not_text_is_named_by_its_type() -> None:
    """Review R62: ``Budget(5, 7)`` says the unit must be text, not what an int fails to match."""
    with pytest.raises(TokenFormatError, match="budget unit must be text, got int"):
        Budget(5, 7)  # type: ignore[arg-type]


@pytest.mark.parametrize("amount", [10**5000, -(10**5000), 2**63], ids=["10**5000", "-10**5000", "2**63"])
def test_an_amount_out_of_range_is_a_token_format_error_however_large(amount: int) -> None:
    """Review R62: ``Budget(10**5000)`` is refused as out of range, a ``TokenFormatError`` that
    names the range, not a ``ValueError`` from writing an integer of more than 4300 digits."""
    with pytest.raises(TokenFormatError, match=r"outside 0 \.\. 2\*\*63-1") as caught:
        Budget(amount)
    assert len(str(caught.value)) < 200


def test_an_amount_that_is_not_an_integer_is_quoted_bounded() -> None:
    """Review R62: ``Budget("x" * 100_000)`` quotes the value bounded, as a unit is."""
    with pytest.raises(TokenFormatError, match="must be an integer number of minor units") as caught:
        Budget("x" * 100_000)  # type: ignore[arg-type]
    assert len(str(caught.value)) < 200 and "(100000 characters)" in str(caught.value)
