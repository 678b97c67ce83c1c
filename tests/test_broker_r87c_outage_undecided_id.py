"""Regression review (round c) of R87: while the broker's journal fails, ``GatedBroker.submit``
refused an allowed request whose id's earlier request ended unjournaled only when that earlier
request had a decision. One queued on the ``Broker`` directly has none: the new request was linked
to the id and queued, and once the journal wrote again the old lease's end was recorded against
the new decision (its reservation settled, its row deleted), the new lease left with no decision.
Now such a request is refused with ``StoreError`` as the decided twin is.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_gated import Setup
from test_broker_r87b_earlier_end_unrecorded import Journal

from agentgate.dispatch.broker import (
    GangRequest,
    LeaseEnded,
)
from agentgate.errors import StoreError


def test_an_undecided_id_ended_in_an_outage_refuses_the_allowed_request(tmp_path: Path) -> None:
    journal = Journal()
    setup = Setup(tmp_path).rebroker(journal=journal)
    gated = setup.gated
    trainer = setup.ids["trainer"]
    try:
        setup.broker.submit(GangRequest("A", "team-a", 8, gpu_type="H100", holder=trainer.did))
        setup.clock.now += 70  # the undecided lease A expired
        journal.down = True
        with pytest.raises(StoreError, match="could not be journaled"):
            gated.submit(trainer, GangRequest("A", "x", 8, gpu_type="H100"))
        assert gated.decisions.get("A") is None
        assert setup.broker.leases() == []
        journal.down = False
        ended = [e.lease.granted_at for e in gated.advance() if isinstance(e, LeaseEnded)]
        assert ended == [1000.0]  # the old lease's end, linked to no new decision
        outcomes = [e.status for e in setup.entries() if e.kind == "outcome"]
        assert outcomes[0] == "error"  # the refused allow is closed
        assert "lease_granted" not in outcomes
    finally:
        setup.gate.close()
