"""Review R82: a call shed for its tenant's token quota was told to retry after the bucket's refill
time unbounded: a ``TenantQuota`` refilling 1e-320 tokens a second (positive and finite, so
accepted) made ``Shed.retry_after_s`` infinite, and the gateway failed writing it as the answer's
``Retry-After`` (an ``OverflowError`` out of ``math.ceil``). Now the router bounds a quota shed's
``Retry-After`` by ``MAX_RETRY_AFTER_S``, as it bounds an SLO shed's, and the gateway writes any
``Shed``'s (a routing policy's own too) as whole seconds from 1 to ``MAX_RETRY_AFTER_S``."""

from __future__ import annotations

import math

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._retry_after import MAX_RETRY_AFTER_S
from agentgate.dispatch.gateway import _errors as gateway_errors
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import Shed


@pytest.mark.parametrize(
    ("max_concurrency", "slo_ttft_s", "said"),
    [
        pytest.param(1, 30.0, "at its max_concurrency", id="every-backend-full"),
        pytest.param(8, 1e-6, "cannot be met", id="slo-met-nowhere"),
    ],
)
def test_a_quota_shed_retry_after_is_at_most_max_retry_after_s(
    max_concurrency: int, slo_ttft_s: float, said: str
) -> None:
    inventory = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "b0",
                    "url": "http://127.0.0.1:9300",
                    "models": ["m"],
                    "max_concurrency": max_concurrency,
                }
            ]
        }
    )
    router = Router(inventory, quotas={"t": TenantQuota(rate_tokens_per_s=1e-320, burst_tokens=1000)})
    first = RouteRequest("A", "m", prompt_tokens=500, max_output_tokens=256, tenant="t", slo_ttft_s=30)
    assert router.route(first, 0.0).action == "dispatch"  # 244 tokens left, refilled never
    second = RouteRequest(
        "B", "m", prompt_tokens=500, max_output_tokens=256, tenant="t", slo_ttft_s=slo_ttft_s
    )
    with pytest.raises(Shed, match=said) as shed:
        router.route(second, 0.0)
    assert "over its token quota" in str(shed.value)
    assert shed.value.retry_after_s == MAX_RETRY_AFTER_S


@pytest.mark.parametrize(
    ("retry_after_s", "header"),
    [
        pytest.param(math.inf, "300", id="infinite"),
        pytest.param(1e300, "300", id="huge"),
        pytest.param(math.nan, "1", id="nan"),
        pytest.param(-5.0, "1", id="negative"),
        pytest.param(7.2, "8", id="rounded-up"),
    ],
)
def test_the_gateway_answers_any_shed_with_a_retry_after_from_1_to_max_retry_after_s(
    retry_after_s: float, header: str
) -> None:
    answer = gateway_errors._dispatch_error(Shed("tenant 'lab' is over its token quota", retry_after_s))
    assert answer.status_code == 429 and answer.headers["Retry-After"] == header
