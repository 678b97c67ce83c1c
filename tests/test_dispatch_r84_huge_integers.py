"""Review R84: the dispatcher's "positive and finite" check (``quota.check_positive_finite``) took
an integer too large for a float (``10**400``) as finite: ``TenantQuota``, ``Timeouts``, the
dispatcher's intervals and a call's ``slo_ttft_s`` accepted it, and its first sum with a float
raised an untyped ``OverflowError`` (a bucket's ``can_pay``, ``Timeouts.answer_s``, the health
loop's ``asyncio.sleep``, which killed the loop: every later call failed with it). The
dispatcher's ``recovery_wait_s`` and the router's ``tie_tolerance`` and ``affinity_slack`` failed
alike. Each is now an ``InputError`` naming it, when made or when the call is made, its value
quoted by its size (an integer of 5,000 digits is more than Python writes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, Timeouts, inventory_from_mapping
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
)
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
HUGE = [
    pytest.param(10**400, id="10**400"),
    pytest.param(10**5000, id="10**5000"),
    pytest.param(-(10**400), id="-10**400"),
]
"""Integers no float holds; 10**5000 is more digits than Python writes (``repr`` raises)."""


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize("name", ["rate_tokens_per_s", "burst_tokens"])
def test_a_quota_too_large_for_a_float_is_refused_when_made(name: str, huge: int) -> None:
    numbers: dict[str, Any] = {"rate_tokens_per_s": 10.0, "burst_tokens": 100.0, name: huge}
    with pytest.raises(InputError, match=f"{name} must be positive and finite, got an integer of"):
        TenantQuota(**numbers)


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize("name", ["first_token_s", "decode_tokens_per_s", "answer_max_s", "probe_s"])
def test_a_timeout_too_large_for_a_float_is_refused_when_made(name: str, huge: int) -> None:
    with pytest.raises(InputError, match=f"timeout {name} must be positive and finite"):
        Timeouts(**{name: huge})


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("health_interval_s", "must be positive and finite"),
        ("scrape_interval_s", "must be positive and finite"),
        ("slo_ttft_s", "must be positive and finite"),
        ("cooldown_s", "must be a finite number >= 0"),
        ("recovery_wait_s", "must be a finite number >= 0"),
    ],
)
def test_a_dispatcher_setting_too_large_for_a_float_is_refused_when_made(
    name: str, said: str, huge: int
) -> None:
    with pytest.raises(InputError, match=f"dispatcher {name} {said}"):
        Dispatcher(INVENTORY, Router(INVENTORY), **{name: huge})


@pytest.mark.parametrize("huge", HUGE)
def test_a_model_slo_too_large_for_a_float_is_refused_when_made(huge: int) -> None:
    with pytest.raises(InputError, match="model_slo_ttft_s\\['m'\\] must be positive and finite"):
        Dispatcher(INVENTORY, Router(INVENTORY), model_slo_ttft_s={"m": huge})


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize("name", ["tie_tolerance", "affinity_slack"])
def test_a_router_tolerance_too_large_for_a_float_is_refused_when_made(name: str, huge: int) -> None:
    with pytest.raises(InputError, match=f"router {name} must be a finite number >= 0"):
        Router(INVENTORY, **{name: huge})


@pytest.mark.parametrize("huge", HUGE)
def test_a_call_slo_too_large_for_a_float_is_refused_before_it_is_routed(huge: int) -> None:
    async def call() -> None:
        async with Dispatcher(INVENTORY, Router(INVENTORY)) as dispatcher:
            await dispatcher.chat(PAYLOAD, slo_ttft_s=huge)

    with pytest.raises(InputError, match="slo_ttft_s must be positive and finite"):
        asyncio.run(call())


@pytest.mark.parametrize("value", [0, 0.0, 2**1023, 1e308])
def test_the_largest_numbers_a_float_holds_are_still_taken(value: float) -> None:
    Dispatcher(INVENTORY, Router(INVENTORY), cooldown_s=value, recovery_wait_s=value)
    Router(INVENTORY, tie_tolerance=value, affinity_slack=value)
    if value:
        assert TenantQuota(rate_tokens_per_s=value, burst_tokens=value).burst_tokens == value
