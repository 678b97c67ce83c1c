"""``GatedBroker.reconcile`` on a broker that is not its name's writer ends nothing (review R96):
a replica that loaded the state before the running broker granted a lease does not end that
lease as lost; it learns it is no authority (``NotWriter``) first."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_gated import Setup

from agentgate.dispatch.broker import GangRequest, GatedBroker
from agentgate.errors import NotWriter
from agentgate.store.broker_leases import BrokerLeaseStore


def test_reconcile_of_a_replica_taken_over_meanwhile_ends_no_live_lease(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        setup.rebroker(journal=BrokerLeaseStore(setup.gate.store))
        trainer = setup.ids["trainer"]
        setup.gated.submit(trainer, GangRequest("ft-1", "team-a", 8, gpu_type="H100"))
        journal = BrokerLeaseStore(setup.gate.store)
        saved = journal.load()  # the replica loads while the running broker still runs
        assert setup.gated.submit(trainer, GangRequest("ft-2", "team-a", 8, gpu_type="H100")).lease()
        replica = setup.new_broker(journal=journal)
        replica.restore(saved)
        with pytest.raises(NotWriter, match="written over since"):
            GatedBroker(setup.gate, replica).reconcile()
        assert setup.gated.decisions.get("ft-2") is not None
        assert not [e for e in setup.entries() if e.status == "lease_lost"]
    finally:
        setup.gate.close()
