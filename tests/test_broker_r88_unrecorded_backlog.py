"""Review R88: a ``GatedBroker``'s backlog of events the store refused is taken from its front
in constant time.

The backlog (``_unrecorded``) was a list, and each event recorded was taken with ``pop(0)``,
which moves every event behind it: recording a backlog left by a store outage cost time
quadratic in its length. It is a deque now; the events are recorded as before, once each, in the
order the broker gave them.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest
from test_broker_restart_budget import World, lease
from test_dispatch_unrecorded_ends import _ends, fault, world

from agentgate.errors import StoreError

__all__ = ["world"]  # the fixture, used by name


def test_a_backlog_left_by_an_outage_is_recorded_in_order_once_the_store_recovers(world: World) -> None:
    gated = world.process.gated
    ids = [f"ft-{i}" for i in range(4)]
    for rid in ids:
        assert gated.submit(world.trainer, lease(rid, gpus=1)).allowed  # each expires 60 s on
    world.clock.now += 120
    with fault(Path(world.url), "broker_decisions", "DELETE"):
        with pytest.raises(StoreError, match="r41 injected"):
            gated.advance()
        assert isinstance(gated._unrecorded, deque)
        assert len(gated._unrecorded) == len(ids)  # every end the broker gave, none recorded
    events = gated.advance()
    assert [event.lease.id for event in events] == ids  # type: ignore[union-attr]
    assert len(gated._unrecorded) == 0
    for rid in ids:
        assert [status for status, _ in _ends(world, rid)] == ["lease_expired"]
    assert world.process.gate.verify().ok
