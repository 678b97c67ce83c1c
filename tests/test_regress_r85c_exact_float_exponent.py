"""Reading R85 again: ``exact_float`` read a JSON number whose exponent no ``Decimal`` holds
(``1e-99999999999999999999``, which a float reads as 0.0) with a bare
``decimal.InvalidOperation``, out of the LangGraph middleware's check of a tool call's arguments
(``inexact_argument``) and of every parse with it. Such a number is inexact unless every digit
before its exponent is 0 (then it is 0 exactly, as the float reads it)."""

from __future__ import annotations

import json

import pytest

from agentgate._json import Inexact, exact_float, inexact_argument


@pytest.mark.parametrize("text", ["1e-99999999999999999999", "-2.5E-99999999999999999999"])
def test_a_number_past_decimals_exponent_is_inexact(text: str) -> None:
    assert isinstance(exact_float(text), Inexact)
    arguments = f'{{"amount": {text}}}'
    assert inexact_argument(arguments, json.loads(arguments)) == ("amount", "'amount'", text)


@pytest.mark.parametrize("text", ["0e-99999999999999999999", "-0.000e-99999999999999999999"])
def test_a_zero_past_decimals_exponent_is_exact(text: str) -> None:
    value = exact_float(text)
    assert value == 0.0 and not isinstance(value, Inexact)
    arguments = f'{{"amount": {text}}}'
    assert inexact_argument(arguments, json.loads(arguments)) is None
