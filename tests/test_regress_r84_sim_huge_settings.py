"""Review R84: ``SimServer`` checked ``time_scale``, ``scrape_lag_s`` and ``body_timeout_s`` as a
number below ``math.inf``, and an integer too large for a float (``10**400``) is one: it was taken,
and the first sum with a float (a scrape's lag, a deadline) raised ``OverflowError``. Each is now
read with ``agentgate._numbers.finite`` and refused with ``InputError`` naming the setting."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer


@pytest.mark.parametrize("setting", ["time_scale", "scrape_lag_s", "body_timeout_s"])
@pytest.mark.parametrize("value", [10**400, float("inf")], ids=["10**400", "inf"])
def test_a_setting_past_a_floats_range_is_refused(setting: str, value: float) -> None:
    with pytest.raises(InputError, match=f"^{setting} must be"):
        SimServer(**{setting: value})
