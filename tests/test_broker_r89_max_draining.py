"""Review R89: ``Broker(max_draining=...)`` is a count of gangs (agentgate/dispatch/broker).

``max_draining``, the most gangs that drain at once, was checked as a time is (finite, >= 0):
``0.5``, ``2.5`` and ``1e300`` were taken, and ``0.5`` let one gang drain, more than was given.
Now anything but an integer >= 0 is ``BrokerError`` naming it, as the benchmark's
``--max-draining`` is refused since review R88.
"""

from __future__ import annotations

import re

import pytest

from agentgate.dispatch.broker import Broker, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError


def _broker(max_draining: object) -> Broker:
    return Broker(synthetic_topology(2, 8), [TenantQuota("a", 16)], max_draining=max_draining)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.5, "0.5"), (2.5, "2.5"), (1.0, "1.0"), (1e300, "1e+300"), (True, "True"), ("1", "'1'"), (-1, "-1")],
)
def test_a_max_draining_that_is_no_integer_is_refused(value: object, shown: str) -> None:
    expected = f"broker max_draining must be an integer >= 0 (gangs draining at once), got {shown}"
    with pytest.raises(BrokerError, match=f"^{re.escape(expected)}$"):
        _broker(value)


@pytest.mark.parametrize("value", [0, 1, 32])
def test_an_integer_count_of_gangs_is_taken(value: int) -> None:
    assert _broker(value).max_draining == value
