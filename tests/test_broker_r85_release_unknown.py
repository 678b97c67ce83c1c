"""Review R85: ``Broker.release`` of an id the broker does not have (agentgate/dispatch/broker).

It marked the state changed before it looked the id up, so an unknown id, which changes nothing,
was written to the journal all the same: a fresh broker over a name another broker journals (one
not restored yet) answered it with that journal's ``StoreError`` instead of ``LeaseLost``, and over
an empty store it wrote an empty state, taking the name. Now only a release that ends a lease or
withdraws a request is written.
"""

from __future__ import annotations

import pytest

from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import LeaseLost
from agentgate.store import Store
from agentgate.store.broker_leases import BrokerLeaseStore


def _broker(journal: BrokerLeaseStore) -> Broker:
    return Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=lambda: 1000.0, journal=journal)


def test_an_unknown_id_is_lease_lost_on_a_broker_not_restored_yet(store: Store) -> None:
    running = _broker(BrokerLeaseStore(store))
    running.submit(GangRequest("job", "a", 2))
    fresh = _broker(BrokerLeaseStore(store))
    with pytest.raises(LeaseLost, match=r"^lease 'nope' is not held"):
        fresh.release("nope")
    running.release("job")  # the running broker is still the name's writer


def test_an_unknown_id_writes_nothing(store: Store) -> None:
    journal = BrokerLeaseStore(store)
    with pytest.raises(LeaseLost):
        _broker(journal).release("nope")
    assert journal.load() is None
