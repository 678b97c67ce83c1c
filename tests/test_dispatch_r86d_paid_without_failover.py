"""``RouteRequest.paid`` counts only for a call failed over (``failover``): a request built with
``paid`` but not failed over is judged by its tenant's whole balance, and under overload a tenant
in debt is shed; the dispatcher, routing such a request again after a failure, hands back only
what the first dispatch took. Until review R86d the router read ``paid`` whether or not
``failover`` was set, and such a request was found within its quota whatever its tenant owed."""

from __future__ import annotations

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._policy import paid_before
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import Shed

INVENTORY = inventory_from_mapping(
    {
        "backends": [
            {"name": f"b{i}", "url": f"http://127.0.0.1:{9240 + i}", "models": ["m"], "max_concurrency": 1}
            for i in range(2)
        ]
    }
)


def _call(name: str, tenant: str = "t", **kw: object) -> RouteRequest:
    """A class-1 call costing 344 + 256 = 600 tokens."""
    return RouteRequest(
        name, "m", prompt_tokens=344, max_output_tokens=256, tenant=tenant, slo_ttft_s=30, **kw
    )  # type: ignore[arg-type]


def test_paid_counts_only_for_a_call_failed_over() -> None:
    assert paid_before(_call("A", paid=600.0)) == 0.0
    assert paid_before(_call("A", failover=True, paid=600.0)) == 600.0


def test_a_request_with_paid_but_not_failed_over_is_shed_when_its_tenant_is_in_debt() -> None:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1e-6, burst_tokens=1000)})
    assert router.route(_call("X"), 0.0).action == "dispatch"  # 600 paid: 400 left
    assert router.route(_call("Y", tenant="other"), 0.0).action == "dispatch"  # the pool is full
    with pytest.raises(Shed, match="over its token quota"):
        router.route(_call("A", paid=600.0), 0.01)  # 400 cannot pay 600; its paid is not counted
    again = router.route(_call("B", failover=True, paid=600.0), 0.01)  # failed over: 1000 can
    assert again.action == "wait" and again.until_freed
