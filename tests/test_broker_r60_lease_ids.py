"""Review R60 of the broker's calls given a lease id or a tenant that is not text.

``release`` and ``renew`` of ``Broker`` and ``GatedBroker`` take the id a holder gives; a list
(an id read from a JSON body as it came) was a ``TypeError`` traceback (unhashable). It names no
lease: ``LeaseLost``, the answer for any id nobody holds, and nothing changes. ``Broker.usage``
of such a tenant is an unknown tenant (``BrokerError``), as for any name without a quota.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_broker import FakeClock
from test_broker_gated import Setup

from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError, LeaseLost

NOT_TEXT: list[Any] = [["ft-1"], {"id": "ft-1"}, None, 7]


@pytest.mark.parametrize("lease_id", NOT_TEXT)
def test_broker_release_and_renew_of_an_id_that_is_not_text_are_lease_lost(lease_id: Any) -> None:
    """Review R60: Broker.release(["ft-1"]) and Broker.renew(["ft-1"]) raised TypeError."""
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=FakeClock())
    broker.submit(GangRequest("ft-1", "a", 4))
    for call in (broker.release, broker.renew):
        with pytest.raises(LeaseLost, match="a lease id is text"):
            call(lease_id)
    assert [lease.id for lease in broker.leases()] == ["ft-1"] and broker.free_gpus() == 4


def test_gated_release_and_renew_of_an_id_that_is_not_text_are_lease_lost(tmp_path: Path) -> None:
    """Review R60: GatedBroker.release(identity, ["ft-1"]) raised TypeError out of the holder's
    lookup, and so did renew."""
    setup = Setup(tmp_path)
    try:
        trainer = setup.ids["trainer"]
        assert setup.gated.submit(trainer, GangRequest("ft-1", "x", 4, gpu_type="H100")).allowed
        entries = len(setup.entries())
        for lease_id in NOT_TEXT:
            with pytest.raises(LeaseLost, match="a lease id is text"):
                setup.gated.release(trainer, lease_id)
            with pytest.raises(LeaseLost, match="a lease id is text"):
                setup.gated.renew(trainer, lease_id)
        assert [lease.id for lease in setup.broker.leases()] == ["ft-1"]
        assert len(setup.entries()) == entries  # nothing decided, nothing audited
    finally:
        setup.gate.close()


@pytest.mark.parametrize("tenant", [["a"], {"a": 1}])
def test_usage_of_a_tenant_that_is_not_text_is_an_unknown_tenant(tenant: Any) -> None:
    """Review R60: Broker.usage(["a"]) raised TypeError (unhashable) out of the quota lookup."""
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=FakeClock())
    with pytest.raises(BrokerError, match="unknown tenant"):
        broker.usage(tenant)
