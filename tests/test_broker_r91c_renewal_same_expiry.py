"""Regression review (c) of R91 (item 3): whether ``Broker.renew``, which raised, had renewed the
lease was told by its expiry being later than before. A renewal sets it to ``ttl_s`` from now:
where it was, at the clock reading of the grant, or sooner, with the broker's ``ttl_s`` lowered
since. Such a renewal, whose journal write then failed, got an ``error`` outcome saying "not
renewed", while the caller got the ``StoreError`` that says renewed all the same. Now it is told
by the lease having been replaced: the renewal stands, linked to its lease, with no outcome."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import BrokerSnapshot, GangRequest
from agentgate.errors import StoreError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


@pytest.mark.parametrize(
    ("later_s", "ttl_s", "expires_at"),
    [(0.0, None, 1060.0), (10.0, 20.0, 1030.0)],
    ids=["at-the-grant's-clock-reading", "broker-ttl-lowered"],
)
def test_a_renewal_that_did_not_move_the_expiry_later_still_stands(
    world: World, later_s: float, ttl_s: float | None, expires_at: float
) -> None:
    process = world.process
    broker = process.broker
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    world.clock.now += later_s
    if ttl_s is not None:
        broker.ttl_s = ttl_s
    journal = broker.journal
    assert journal is not None
    save = journal.save

    def failing(snapshot: BrokerSnapshot) -> None:
        journal.save = save  # type: ignore[method-assign]
        raise StoreError("database is locked")

    journal.save = failing  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="database is locked"):  # renewed all the same
        process.gated.renew(world.trainer, "job1")
    assert next(lease for lease in broker.leases() if lease.id == "job1").expires_at == expires_at
    _job1, renewal = (e.index for e in process.entries() if e.kind == "allow")
    assert [e.status for e in process.entries() if e.kind == "outcome" and e.ref == renewal] == []
