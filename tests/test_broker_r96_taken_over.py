"""A broker process taken over by a restart fails closed (review R96): its journal's refusal is
``NotWriter``, a renewal there is ``LeaseLost`` (never the ``StoreError`` that says renewed), and a
submit there leaves no open allow in the shared store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_gated import Setup

from agentgate.dispatch.broker import Broker, GangRequest
from agentgate.errors import LeaseLost, NotWriter, StoreError
from agentgate.store.broker_leases import BrokerLeaseStore


@pytest.fixture
def taken_over(tmp_path: Path) -> Iterator[tuple[Setup, Broker]]:
    """OLD (``setup.gated``) holds ft-1; NEW restored the state and took the name over."""
    setup = Setup(tmp_path)
    try:
        setup.rebroker(journal=BrokerLeaseStore(setup.gate.store))
        answer = setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "team-a", 8, gpu_type="H100"))
        assert answer.lease() is not None
        journal = BrokerLeaseStore(setup.gate.store)
        new = setup.new_broker(journal=journal)
        new.restore(journal.load())
        new.advance()  # its first write takes the name over
        yield setup, new
    finally:  # a set-up that fails closes the gate too
        setup.gate.close()


def test_the_old_brokers_journal_refuses_as_not_writer(taken_over: tuple[Setup, Broker]) -> None:
    setup, _ = taken_over
    with pytest.raises(NotWriter, match="journaled by another broker process"):
        setup.broker.submit(GangRequest("small", "team-b", 1))


def test_a_renewal_at_the_broker_taken_over_from_is_lease_lost_not_store_error(
    taken_over: tuple[Setup, Broker],
) -> None:
    setup, new = taken_over
    expires = new.leases()[0].expires_at
    setup.clock.now += 30
    with pytest.raises(LeaseLost) as raised:
        setup.broker.renew("ft-1")
    assert isinstance(raised.value.__cause__, NotWriter)
    with pytest.raises(LeaseLost) as raised:
        setup.gated.renew(setup.ids["trainer"], "ft-1")
    assert isinstance(raised.value.__cause__, NotWriter)
    # The authority never renewed it: it ends at its old expiry.
    assert new.leases()[0].expires_at == expires


def test_a_submit_at_the_broker_taken_over_from_leaves_no_open_allow(
    taken_over: tuple[Setup, Broker],
) -> None:
    setup, _ = taken_over
    with pytest.raises(StoreError):
        setup.gated.submit(setup.ids["trainer"], GangRequest("ft-9", "team-a", 8, gpu_type="H100"))
    assert setup.gated.decisions.get("ft-9") is None
    closed = [e for e in setup.entries() if e.kind == "outcome" and e.status == "error"]
    assert closed, "the allow of ft-9 is closed with an error outcome"
