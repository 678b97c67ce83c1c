"""Review R82: a call failed over (``RouteRequest.failover``: its backend failed before any
output, and the dispatcher routes it again) was judged by a token bucket that had already paid
for it. ``_go`` rightly did not debit it again, but the router's quota tests (``_saturated``, the
SLO-unmet branch of ``choose``, the line's ``_free`` and ``_match``) asked whether the balance
could pay its cost once more, so a tenant within its quota was shed as "over its token quota",
or passed over in line, for its own charge. Now those tests judge a call failed over by the
balance without its own debit (``TokenBucket.can_pay``'s ``paid``): it waits, or is served
best-effort, as it would have on its first route; a tenant in debt from its other calls is still
shed."""

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
            {"name": f"b{i}", "url": f"http://127.0.0.1:{9200 + i}", "models": ["m"], "max_concurrency": 1}
            for i in range(2)
        ]
    }
)


def _call(name: str, tenant: str = "t", prompt: int = 344, **kw: object) -> RouteRequest:
    """A class-1 call; for tenant ``t`` it costs 600 tokens (344 prompt + 256 output)."""
    return RouteRequest(name, "m", prompt_tokens=prompt, max_output_tokens=256, tenant=tenant, **kw)  # type: ignore[arg-type]


def _failed_over(router: Router, call: RouteRequest, now: float) -> RouteRequest:
    """``call`` dispatched, its backend failing it before any output (the dispatcher reports it
    finished and marks the backend down): the request the dispatcher routes again, carrying what
    its dispatch took (``RoutePlan.debited``) as ``paid``."""
    plan = router.route(call, now)
    assert plan.action == "dispatch" and plan.backend is not None
    router.finished(call.id, now)
    router.mark_down(plan.backend)
    return dataclasses.replace(call, failover=True, paid=plan.debited)


def _router() -> Router:
    return Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1, burst_tokens=1000)})


def test_a_call_failed_over_to_a_full_pool_waits_for_a_slot_not_shed_for_its_own_charge() -> None:
    router = _router()
    a = _failed_over(router, _call("A", slo_ttft_s=30), 0.0)  # its bucket: 1000 - 600 = 400
    assert router.route(_call("B", tenant="other", slo_ttft_s=30), 0.0).action == "dispatch"
    plan = router.route(a, 0.01)  # the one backend up is full: A waits, as a fresh call would
    assert plan.action == "wait" and plan.until_freed


def test_a_call_failed_over_where_its_slo_cannot_be_met_is_not_shed_for_its_own_charge() -> None:
    router = _router()
    # A prompt whose prefill alone takes longer than the SLO: served best-effort, not shed.
    a = _failed_over(router, _call("A", slo_ttft_s=1e-6), 0.0)
    plan = router.route(a, 0.01)
    assert plan.action == "dispatch" and "best-effort" in plan.reason


def test_a_call_failed_over_keeps_its_place_in_line_ahead_of_a_later_waiter() -> None:
    router = _router()
    a = _failed_over(router, _call("A", slo_ttft_s=30), 0.0)
    router.route(_call("B", tenant="other", slo_ttft_s=30), 0.0)
    assert router.route(a, 0.01).action == "wait"
    c = _call("C", tenant="other", slo_ttft_s=30, arrived_at=0.02)
    assert router.route(c, 0.02).action == "wait"
    router.finished("B", 0.03)  # the slot frees: it is A's, first in line
    assert router.due(0.03) == ["A"]
    assert router.route(c, 0.03).action == "wait"
    assert router.route(a, 0.03).action == "dispatch"


def test_a_tenant_in_debt_from_its_other_calls_is_still_shed_when_a_call_fails_over() -> None:
    router = Router(
        inventory_from_mapping(
            {
                "backends": [
                    {
                        "name": f"b{i}",
                        "url": f"http://127.0.0.1:{9210 + i}",
                        "models": ["m"],
                        "max_concurrency": 1,
                    }
                    for i in range(3)
                ]
            }
        ),
        quotas={"t": TenantQuota(rate_tokens_per_s=1, burst_tokens=1000)},
    )
    assert router.route(_call("X", slo_ttft_s=30), 0.0).action == "dispatch"  # 400 left
    a = _failed_over(router, _call("A", slo_ttft_s=30), 0.0)  # -200: 400 without A's own charge
    router.route(_call("B", tenant="other", slo_ttft_s=30), 0.0)  # the last backend up is full
    with pytest.raises(Shed, match="over its token quota"):
        router.route(a, 0.01)


@pytest.mark.parametrize(
    ("cost", "before", "paid_covers"),
    [
        pytest.param(600.0, 1000.0, True, id="within-the-burst"),
        pytest.param(600.0, 500.0, False, id="in-debt-from-other-calls"),
        pytest.param(1500.0, 1000.0, True, id="over-the-burst-from-a-full-bucket"),
        pytest.param(1500.0, 900.0, False, id="over-the-burst-from-a-bucket-not-full"),
    ],
)
def test_a_bucket_judges_a_call_it_paid_for_by_its_balance_without_that_debit(
    cost: float, before: float, paid_covers: bool
) -> None:
    bucket = TokenBucket(TenantQuota(rate_tokens_per_s=1e-9, burst_tokens=1000), 0.0)
    bucket.debit(1000.0 - before, 0.0)  # the tenant's other calls
    paid = bucket.debit(cost, 0.0)  # this call, when it was first dispatched
    assert bucket.can_pay(cost, 0.0, paid=paid) is paid_covers
