"""Review R84 (reading the change again): the PostgreSQL pool's wait, given as an integer too
large for a float, is the InputError any wait out of range gets, not math.isfinite's
OverflowError."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.store._postgres import pool_settings


@pytest.mark.parametrize("timeout_s", [10**400, -(10**400)])
def test_a_pool_wait_no_float_holds_is_refused_as_out_of_range(timeout_s: int) -> None:
    with pytest.raises(InputError, match="timeout_s must be more than 0"):
        pool_settings(5, timeout_s)


def test_a_pool_wait_in_range_is_taken() -> None:
    assert pool_settings(5, 3) == (5, 3)
