"""Review R66: a broker call that is refused still tries the queue after applying the clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_broker import FakeClock

from agentgate.dispatch.broker import Broker, BrokerSnapshot, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError, LeaseLost


class Journal:
    """Keeps what the broker saves (a ``LeaseJournal`` in memory)."""

    def __init__(self) -> None:
        self.saved: list[BrokerSnapshot] = []

    def save(self, snapshot: BrokerSnapshot) -> None:
        self.saved.append(snapshot)

    def take_over(self, snapshot: BrokerSnapshot) -> None:
        return None


def _release_unknown(broker: Broker) -> None:
    with pytest.raises(LeaseLost):
        broker.release("never-held")


def _submit_impossible(broker: Broker) -> None:
    with pytest.raises(BrokerError, match="exceed"):
        broker.submit(GangRequest("too-big", "a", 9))


@pytest.mark.parametrize("refused", [_release_unknown, _submit_impossible])
def test_a_refused_call_places_what_the_leases_it_ended_made_room_for(
    refused: Callable[[Broker], None],
) -> None:
    """Review R66: ``release`` of an id not held and ``submit`` of a request that could never be
    placed applied the clock (a dead holder's lease expired) and raised without trying the queue
    or writing the journal: the request waiting for those GPUs stayed waiting with them free,
    and ``next_deadline`` named nothing before its locality wait (1800 s by default), so a driver
    advancing at it left the GPUs idle that long. Now such a call tries the queue and journals, as
    ``renew`` did, then raises; its events come out of the next call."""
    clock = FakeClock()
    journal = Journal()
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock, ttl_s=10.0, journal=journal)
    broker.submit(GangRequest("dead", "a", 8))
    broker.submit(GangRequest("next", "a", 8, timeout_s=3600.0))
    clock.now = 10.0  # "dead" was never renewed: it expires now
    refused(broker)
    assert [lease.id for lease in broker.leases()] == ["next"]
    assert broker.queue() == []
    assert [lease.id for lease in journal.saved[-1].leases] == ["next"]
    assert {type(e).__name__: e for e in broker.advance()}.keys() == {"LeaseEnded", "Granted"}
