"""Regression review (round c) of R87: ``Budget.parse(..., metered=True)`` told an amount padded
past 19 digits with a unit agentgate does not meter (``0...07:usd``) to write ``7:usd``, which the
same call then refuses as an unmetered unit. The value to write now shows ``UNIT``, to be named,
for such a unit, and keeps a metered one (agentgate/authority/_grant.py).
"""

from __future__ import annotations

import pytest

from agentgate.authority import Budget
from agentgate.errors import TokenFormatError


@pytest.mark.parametrize(
    ("text", "metered", "value"),
    [
        ("0" * 19 + "7:usd", True, "7:UNIT"),
        ("0" * 19 + "7:calls", True, "7:calls"),
        ("0" * 19 + "7:usd", False, "7:usd"),  # the token format allows any unit name
    ],
    ids=["unmetered", "metered", "not-asked"],
)
def test_the_value_to_write_is_one_the_same_call_takes(text: str, metered: bool, value: str) -> None:
    with pytest.raises(TokenFormatError) as raised:
        Budget.parse(text, metered=metered)
    assert str(raised.value).endswith(f"write it without its leading zeros ({value})")
    if not value.endswith(":UNIT"):
        assert Budget.parse(value, metered=metered) == Budget.parse(text.lstrip("0"))
