"""Review R86: a token bucket's balance never falls below ``-burst``, so a call's debit may be
clipped; a call failed over was judged by its balance with its whole cost added back, more than
the debit took. A call costing twice the burst or more then counted as within quota whatever its
tenant owed from its other calls, and waited for a slot under overload instead of being shed.
Now each plan says what its dispatch took (``RoutePlan.debited``, ``TokenBucket.debit``'s return),
the dispatcher hands it back with the call failed over (``RouteRequest.paid``), and the router adds
back that."""

from __future__ import annotations

import dataclasses

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.quota import TenantQuota, TokenBucket
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import Shed

INVENTORY = inventory_from_mapping(
    {
        "backends": [
            {"name": f"b{i}", "url": f"http://127.0.0.1:{9230 + i}", "models": ["m"], "max_concurrency": 1}
            for i in range(3)
        ]
    }
)


def _call(name: str, prompt: int, tenant: str = "t", **kw: object) -> RouteRequest:
    """A class-1 call costing ``prompt`` + 256 tokens."""
    return RouteRequest(
        name, "m", prompt_tokens=prompt, max_output_tokens=256, tenant=tenant, slo_ttft_s=30, **kw
    )  # type: ignore[arg-type]


def test_a_debit_clipped_at_the_floor_returns_what_it_took() -> None:
    bucket = TokenBucket(TenantQuota(rate_tokens_per_s=1e-9, burst_tokens=1000), 0.0)
    assert bucket.debit(600, 0.0) == 600  # 400 left
    assert bucket.debit(2100, 0.0) == 1400  # down to -1000, not -1700
    assert bucket.can_pay(2100, 0.0, paid=1400) is False  # 400 without it: not a full bucket


def test_a_call_costing_twice_the_burst_failed_over_is_shed_when_its_tenant_owes_for_others() -> None:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1, burst_tokens=1000)})
    assert router.route(_call("X", 344), 0.0).action == "dispatch"  # 600 paid: 400 left
    a = _call("A", 1844)  # 2100: takes 1400, down to -1000
    plan = router.route(a, 0.0)
    assert plan.action == "dispatch" and plan.backend is not None
    router.finished("A", 0.0)  # its backend failed it before any output
    router.mark_down(plan.backend)
    assert router.route(_call("B", 344, tenant="other"), 0.0).action == "dispatch"  # the pool is full
    with pytest.raises(Shed, match="over its token quota"):
        router.route(dataclasses.replace(a, failover=True, paid=plan.debited), 0.01)


def test_a_call_over_the_burst_failed_over_from_a_full_bucket_still_waits() -> None:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1, burst_tokens=1000)})
    a = _call("A", 1844)  # 2100 from a full bucket: takes 2000, down to -1000
    plan = router.route(a, 0.0)
    assert plan.action == "dispatch" and plan.backend is not None
    router.finished("A", 0.0)
    router.mark_down(plan.backend)
    for name in ("B", "C"):
        assert router.route(_call(name, 344, tenant="other"), 0.0).action == "dispatch"
    again = router.route(dataclasses.replace(a, failover=True, paid=plan.debited), 0.01)
    assert again.action == "wait" and again.until_freed
