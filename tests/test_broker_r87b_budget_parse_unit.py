"""Regression review of R87: the value ``Budget.parse`` tells a caller to write for an amount
padded past 19 digits keeps its unit (agentgate/authority/_grant.py).

R87's refusal told ``0...07:calls`` to write ``7``, which is 7 ``usd_micros``, not 7 calls. The
value now keeps the unit, and a unit that is no unit name (which ``Budget`` refuses next) is
shown as ``UNIT``, to be named, rather than echoed.
"""

from __future__ import annotations

import pytest

from agentgate.authority import Budget
from agentgate.errors import TokenFormatError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0" * 19 + "7:calls", "7:calls"),
        ("0" * 30 + "500:usd_micros", "500:usd_micros"),
        ("0" * 19 + "7", "7"),
        ("0" * 19 + "7:", "7:UNIT"),
        ("0" * 19 + "7:Calls\x1b[2J" + "x" * 1000, "7:UNIT"),
    ],
    ids=["calls", "usd-micros", "no-unit", "empty-unit", "no-unit-name"],
)
def test_the_value_to_write_keeps_the_unit(text: str, value: str) -> None:
    with pytest.raises(TokenFormatError) as raised:
        Budget.parse(text)
    assert str(raised.value).endswith(f"write it without its leading zeros ({value})")
    if value.endswith(":UNIT"):
        assert len(str(raised.value)) < 200
    else:
        assert Budget.parse(value) == Budget.parse(text.lstrip("0"))
