"""Review R68: text holding a NUL character in a gang request or a quota.

PostgreSQL holds no NUL in text ("PostgreSQL text fields cannot contain NUL (0x00) bytes"). A
request whose id or tenant held one was queued and granted, and the journal's write failed on it,
and every later write while it lived: every call of every tenant raised ``StoreError``, as a
request with a priority past 32 bits once did (review R51). ``GangRequest`` and ``TenantQuota``
refuse such text with ``BrokerError``, on every store, naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.dispatch.broker import Broker, GangRequest, Granted, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError
from agentgate.store import Store
from agentgate.store.broker_leases import BrokerLeaseStore


def test_a_request_with_a_nul_in_its_id_is_refused_and_the_journaled_broker_goes_on(store: Store) -> None:
    """Review R68: on PostgreSQL the broker granted ``a\\x00b``, then its journal's write failed,
    and so did the next request's (``StoreError`` for every tenant). The request is refused before
    the broker sees it; the next one is granted and journaled."""
    broker = Broker(
        synthetic_topology(1, 8), [TenantQuota("t", 8)], clock=lambda: 1000.0, journal=BrokerLeaseStore(store)
    )
    with pytest.raises(BrokerError, match=r"id holds a NUL character"):
        broker.submit(GangRequest("a\x00b", "t", 1))
    assert any(isinstance(e, Granted) for e in broker.submit(GangRequest("next", "t", 1)))
    saved = BrokerLeaseStore(store).load()
    assert saved is not None and [lease.id for lease in saved.leases] == ["next"]


@pytest.mark.parametrize("field", ["id", "tenant", "gpu_type", "holder"])
def test_a_gang_request_refuses_a_nul_in_its_text(field: str) -> None:
    """Review R68: each text field of a request is journaled (the id and the tenant in their own
    columns): a NUL in one is refused, naming the field."""
    fields: dict[str, Any] = {"id": "r1", "tenant": "t", "gpus": 1, field: "x\x00y"}
    with pytest.raises(BrokerError, match=rf"{field} holds a NUL character"):
        GangRequest(**fields)


@pytest.mark.parametrize("field", ["tenant", "cohort"])
def test_a_quota_refuses_a_nul_in_its_tenant_or_cohort(field: str) -> None:
    """Review R68: a quota's tenant with a NUL was taken, and each of its requests then wedged a
    broker journaled on PostgreSQL; refused as a lone surrogate is (review R60)."""
    fields: dict[str, Any] = {"tenant": "t", "nominal": 4, "cohort": "lab", field: "x\x00y"}
    with pytest.raises(BrokerError, match=rf"the {field} holds a NUL character"):
        TenantQuota(**fields)
