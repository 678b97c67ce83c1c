"""Review R89: ``Router(quotas=...)`` took any value: a dict of a ``TenantQuota``'s fields (as a
config file reads it), or the broker's ``TenantQuota`` of the same name, and the tenant's first
routed call failed with an untyped ``AttributeError``. ``speed`` was already checked at
construction for that reason; ``quotas`` now is too: ``InputError`` naming the tenant."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.broker import TenantQuota as BrokerQuota
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b1", "url": "http://127.0.0.1:9", "models": ["m"]}]}
)


@pytest.mark.parametrize(
    ("quotas", "refusal"),
    [
        pytest.param(
            {"t": {"rate_tokens_per_s": 10.0, "burst_tokens": 100.0}},
            r"router quota for tenant 't' must be a TenantQuota \(agentgate\.dispatch\.quota\), got dict",
            id="dict-of-fields",
        ),
        pytest.param(
            {"t": BrokerQuota("t", 100)},
            r"router quota for tenant 't' must be a TenantQuota .*got agentgate\.dispatch\.broker\..*TenantQuota",
            id="broker-quota",
        ),
        pytest.param({"t": None}, r"tenant 't' must be a TenantQuota .*got NoneType", id="none"),
        pytest.param(
            {7: TenantQuota(10.0, 100.0)}, r"keyed by tenant name \(text\), got int", id="key-not-text"
        ),
        pytest.param([("t", TenantQuota(10.0, 100.0))], r"must be a mapping .*got list", id="not-a-mapping"),
    ],
)
def test_quotas_that_are_not_tenant_quotas_are_refused_at_construction(quotas: Any, refusal: str) -> None:
    with pytest.raises(InputError, match=refusal):
        Router(INVENTORY, quotas=quotas)


def test_tenant_quotas_are_taken_and_charged() -> None:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=10.0, burst_tokens=100.0)})
    plan = router.route(RouteRequest(id="1", model="m", prompt_tokens=10, tenant="t"), now=0.0)
    assert plan.action == "dispatch" and "t" in router._buckets
