"""Review R84: text where a number belongs is told "write the value unquoted" only where the text,
unquoted, reads as a number. Python's ``float`` takes Arabic-Indic and fullwidth digits
(``float("١٠")`` is 10.0), YAML does not: ``timeout_s: "١٠"`` was told to unquote it, and
unquoted it was refused with the same hint."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


def hint(field: str, value: str) -> str:
    section = "tools:\n  t:\n" if field == "timeout_s" else "roles:\n  r:\n"
    with pytest.raises(PolicyError) as refused:
        parse_policy(f"version: 1\n{section}    {field}: {value}\n", source="p.yaml")
    return refused.value.hint or ""


@pytest.mark.parametrize("value", ['"١٠"', "١٠", '"１０"', "'٣.٥'"])
@pytest.mark.parametrize("field", ["timeout_s", "ttl_s"])
def test_a_number_in_other_digits_is_not_told_to_be_unquoted(field: str, value: str) -> None:
    """Review R84: unquoted, such a number is still text: the hint names the digits to write."""
    assert hint(field, value) == "write the number with the digits 0 to 9, unquoted"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout_s", '"10"'),
        ("timeout_s", '" 1e3 "'),
        ("timeout_s", "'2.5'"),
        ("ttl_s", '"600"'),
        ("ttl_s", "'0x10'"),
    ],
)
def test_a_quoted_number_that_reads_as_one_unquoted_is_told_to_unquote_it(field: str, value: str) -> None:
    assert hint(field, value) == "write the value unquoted"


@pytest.mark.parametrize(
    ("field", "value"), [("ttl_s", '"2.5"'), ("timeout_s", '"1e999"'), ("timeout_s", '"true"')]
)
def test_a_quoted_value_that_unquoted_is_no_number_of_the_kind_is_not_told_to_unquote_it(
    field: str, value: str
) -> None:
    """An integer field given "2.5", a number past a float's range, a boolean: unquoting is no fix."""
    assert hint(field, value) == "write a plain number, without a unit (10:30 is text, not 630)"
