"""Review R66: the dispatcher's ``max_attempts`` is checked when the dispatcher is made."""

from __future__ import annotations

import math

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import InputError


@pytest.mark.parametrize("value", [2.0, 1.5, math.nan, math.inf, "3", None, True, 0, -2])
def test_a_max_attempts_that_is_no_whole_number_from_one_is_an_input_error(value: object) -> None:
    """Review R66: ``max_attempts`` was taken as ``max(1, max_attempts)``: 2.0 was an untyped
    ``TypeError`` out of every call (``range`` of a float), NaN became 1 attempt, a string a
    ``TypeError`` out of the constructor, and 0 or less silently one attempt. Now ``InputError``
    naming it, when the dispatcher is made."""
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9000", "models": ["m"]}]}
    )
    with pytest.raises(InputError, match="dispatcher max_attempts must be a whole number >= 1"):
        Dispatcher(inventory, Router(inventory), max_attempts=value)  # type: ignore[arg-type]
