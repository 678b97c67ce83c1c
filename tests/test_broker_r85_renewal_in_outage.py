"""Review R85: a renewal while the broker's journal cannot be written (agentgate/dispatch/broker).

``Broker.renew`` tried the queue and wrote the journal before it extended the lease, and a failed
write leaves the state to write: while the journal's store was out, every renewal after the first
raised ``StoreError`` before extending the lease (through ``GatedBroker`` its ``advance`` raised
first, before any decision), though ``GatedBroker.renew`` promises "the lease is renewed all the
same, and its extension reserved": the lease ended at its old expiry while its holder ran. Now
every renewal of an outage extends the lease in memory before the write that fails, and the
journal's next write that succeeds holds it.
"""

from __future__ import annotations

import pytest
from test_broker_library_use import FlakyJournal
from test_broker_restart_budget import World, lease

from agentgate.dispatch.broker import Broker, GangRequest, LeaseEnded, TenantQuota, synthetic_topology
from agentgate.errors import StoreError
from agentgate.store import Store


def test_every_renewal_of_an_outage_extends_the_lease(store: Store) -> None:
    now = [1000.0]
    journal = FlakyJournal(store)
    broker = Broker(
        synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=lambda: now[0], ttl_s=60, journal=journal
    )
    broker.submit(GangRequest("job", "a", 2))
    journal.failing = True
    for at in (1030.0, 1050.0, 1070.0):
        now[0] = at
        with pytest.raises(StoreError, match="injected"):
            broker.renew("job")
        assert broker.leases()[0].expires_at == at + 60
    journal.failing = False
    now[0] = 1100.0  # past every expiry but the last renewal's
    assert not any(isinstance(event, LeaseEnded) for event in broker.advance())
    saved = journal.load()
    assert saved is not None and [held.expires_at for held in saved.leases] == [1130.0]


def test_a_gated_renewal_of_an_outage_renews_and_pays_for_what_it_added(store: Store) -> None:
    world = World(store.url)
    try:
        journal = FlakyJournal(world.process.store)
        world.process.broker.journal = journal
        gated = world.process.gated
        gated.submit(world.trainer, lease("ft-1"))  # 2 GPUs, t=1000..1060
        journal.failing = True
        for step in (30, 20):  # renewed to 1090, then to 1110
            world.clock.now += step
            with pytest.raises(StoreError, match="injected"):
                gated.renew(world.trainer, "ft-1")
            assert world.process.broker.leases()[0].expires_at == world.clock.now + 60
        journal.failing = False
        world.clock.now = 1095  # past the first renewal's expiry
        assert gated.advance() == []
        world.clock.now = 1200
        gated.advance()
        expired = world.process.entries()[-1]
        # held 1000..1110: 110 s x 2 GPUs at 1,000 micro-dollars a GPU-second, every reservation settled
        assert (expired.status, expired.budget_delta) == ("lease_expired", 220_000)
        assert world.spent() == 220_000 and world.remaining() == world.budget - 220_000
    finally:
        world.process.gate.close()
