"""Review R82: a lease's ``ttl_s`` is at least ``MIN_TTL_S``, a millisecond.

Only a ``ttl_s`` of 0 or less was refused (review R52): one above 0 but below the clock's
resolution (``1e-7`` at a Unix time of ``1.8e9``, where a double's step is ``2.4e-7``) added
nothing to the clock, and the lease was granted and expired in the same call (``expires_at ==
granted_at``), the lease docs/broker.md refuses a ``ttl_s`` of 0 for: one no holder could use or
renew. Such a ``ttl_s``, a request's or the broker's default, is refused as bad input now.
"""

from __future__ import annotations

import pytest

from agentgate.dispatch.broker import Broker, GangRequest, Granted, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError


class _Clock:
    now = 1.8e9

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("ttl_s", [1e-7, 1e-4, 0.000999])
def test_a_ttl_under_a_millisecond_is_refused(ttl_s: float) -> None:
    with pytest.raises(BrokerError, match=r"'x': ttl_s must be more than 0: at least 0.001 s"):
        GangRequest("x", "a", 1, ttl_s=ttl_s)
    with pytest.raises(BrokerError, match=r"broker ttl_s must be more than 0: at least 0.001 s"):
        Broker(synthetic_topology(1, 2), [TenantQuota("a", 2)], clock=_Clock(), ttl_s=ttl_s)


def test_the_shortest_lease_outlives_the_call_that_grants_it() -> None:
    broker = Broker(synthetic_topology(1, 2), [TenantQuota("a", 2)], clock=_Clock())
    (granted,) = broker.submit(GangRequest("x", "a", 1, ttl_s=0.001))  # MIN_TTL_S
    assert isinstance(granted, Granted)
    assert granted.lease.expires_at > granted.lease.granted_at
    assert [lease.id for lease in broker.leases()] == ["x"]
