"""Regression review of R87: the id of an ended request whose end cannot be recorded yet
(agentgate/dispatch/broker/_gated.py, ``submit``, ``_refuse_earlier``).

R87 freed the id of a lease the clock had ended by applying the clock before the decision, but
while the broker's journal failed it swallowed the journal's ``StoreError``: the ended lease's
events stayed in the broker, its decision's row with them, and its holder was told "already
live". Linking a new decision to the id then would have that end recorded against the new one
once the journal wrote. Now an allowed request with such an id is refused with ``StoreError``
saying so (its allow closed with an ``error`` outcome), a request the policy refuses is refused as
ever, and once the journal writes the id is free. An id whose decision's request the broker does
not hold at all (lost in a restart) is refused with a ``BrokerError`` naming ``reconcile``, where
its holder was told "already live".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_gated import Setup

from agentgate.dispatch.broker import (
    BrokerSnapshot,
    GangRequest,
    LeaseEnded,
)
from agentgate.errors import BrokerError, StoreError


class Journal:
    """A journal whose writes fail while ``down``."""

    def __init__(self) -> None:
        self.down = False

    def save(self, snapshot: BrokerSnapshot) -> None:
        if self.down:
            raise StoreError("journal down")

    def take_over(self, snapshot: BrokerSnapshot) -> None:
        pass


@pytest.mark.parametrize("holder", ["trainer", "other"], ids=["same-holder", "other-holder"])
def test_an_expired_id_is_refused_while_its_end_cannot_be_journaled_then_free(
    tmp_path: Path, holder: str
) -> None:
    setup = Setup(tmp_path)
    try:
        journal = Journal()
        setup.rebroker(journal=journal)
        setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "x", 8, gpu_type="H100"))
        first = setup.gated.decisions.get("ft-1")
        assert first is not None
        setup.clock.now += 120  # the lease expired at 1060
        journal.down = True
        before = len(setup.entries())

        refused = setup.gated.submit(setup.ids["chat"], GangRequest("ft-1", "x", 1, gpu_type="H100"))
        assert not refused.allowed  # the policy's refusal, told as for any id
        with pytest.raises(StoreError) as raised:
            setup.gated.submit(setup.ids[holder], GangRequest("ft-1", "x", 4, gpu_type="H100"))

        assert str(raised.value) == (
            "request 'ft-1': the end of the earlier request with this id could not be journaled "
            "(journal down); submit it again once the journal writes"
        )
        deny, allow, error = setup.entries()[before:]
        assert (deny.kind, allow.kind, allow.principal) == ("deny", "allow", setup.ids[holder].did)
        assert (error.kind, error.status, error.ref) == ("outcome", "error", allow.index)
        assert setup.gated.decisions.get("ft-1") == first  # the earlier decision, still to be ended

        journal.down = False
        before = len(setup.entries())
        answer = setup.gated.submit(setup.ids[holder], GangRequest("ft-1", "x", 4, gpu_type="H100"))

        assert answer.allowed and answer.lease() is not None
        ended, again, granted = setup.entries()[before:]
        assert (ended.status, ended.ref) == ("lease_expired", first.audit_index)
        assert (again.kind, granted.status, granted.ref) == ("allow", "lease_granted", again.index)
        linked = setup.gated.decisions.get("ft-1")
        assert linked is not None and linked.audit_index == again.index
        assert [type(e).__name__ for e in answer.events] == ["LeaseEnded", "Granted"]
        assert isinstance(answer.events[0], LeaseEnded) and answer.events[0].lease.granted_at == 1000.0
    finally:
        setup.gate.close()


def test_an_id_whose_request_the_broker_lost_is_refused_naming_reconcile(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        trainer = setup.ids["trainer"]
        setup.gated.submit(trainer, GangRequest("ft-1", "x", 8, gpu_type="H100"))
        setup.rebroker()  # a restart whose broker lost the lease
        before = len(setup.entries())

        with pytest.raises(BrokerError) as raised:
            setup.gated.submit(trainer, GangRequest("ft-1", "x", 4, gpu_type="H100"))

        assert str(raised.value) == (
            "request 'ft-1' still has the decision of a request the broker does not hold "
            "(lost in a restart): GatedBroker.reconcile() ends it"
        )
        allow, error = setup.entries()[before:]
        assert (allow.kind, error.status, error.ref) == ("allow", "error", allow.index)
        assert setup.gated.reconcile() == ["ft-1"]
        assert setup.gated.submit(trainer, GangRequest("ft-1", "x", 4, gpu_type="H100")).lease() is not None
    finally:
        setup.gate.close()
