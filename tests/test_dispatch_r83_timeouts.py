"""Review R83: a backend timeout that is text, a bool, zero, negative, NaN or infinite is refused
with ``InputError`` naming the timeout, when the ``Timeouts`` is made (text used to reach an
untyped ``TypeError`` from the comparison), by the one check the dispatcher's settings and the
tenants' quotas use too."""

from __future__ import annotations

import math

import pytest

from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.quota import TenantQuota
from agentgate.errors import InputError

_NOT_POSITIVE_FINITE = ["2", True, 0, -1.0, math.nan, math.inf, None]


@pytest.mark.parametrize("name", ["connect_s", "first_token_s", "idle_s", "probe_s", "answer_max_s"])
@pytest.mark.parametrize("value", _NOT_POSITIVE_FINITE, ids=repr)
def test_timeout_not_positive_finite_is_input_error(name: str, value: object) -> None:
    with pytest.raises(InputError, match=f"timeout {name} must be positive and finite, got {value!r}"):
        Timeouts(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", _NOT_POSITIVE_FINITE, ids=repr)
def test_quota_not_positive_finite_is_input_error(value: object) -> None:
    with pytest.raises(InputError, match="token quota: burst_tokens must be positive and finite"):
        TenantQuota(rate_tokens_per_s=1.0, burst_tokens=value)  # type: ignore[arg-type]


def test_positive_finite_numbers_are_taken() -> None:
    assert Timeouts(connect_s=1, first_token_s=0.5).connect_s == 1
    assert TenantQuota(rate_tokens_per_s=2, burst_tokens=0.25).burst_tokens == 0.25
