"""Regression review (b) of R91 (item 2): ``GatedBroker.renew`` linked the renewal's reservation to
its lease in a handler for whatever ``Broker.renew`` raised, but its own link, once
``Broker.renew`` returned, was outside every handler. A Ctrl-C at a store that hangs lands in that
link's transaction: the lease ran the extension, whose reservation was held for ever, tied to
nothing, and the lease was charged no more than its first reservation. Now the link, rolled back,
is written again before the interrupt is raised."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest
from agentgate.store import Transaction


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def test_a_renewal_interrupted_in_its_own_link_keeps_its_reservation_with_the_lease(world: World) -> None:
    process = world.process
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # granted at 1000
    world.clock.now += 30
    broker, ledger = process.broker, process.gate.ledger
    renew, still_held = broker.renew, ledger.still_held

    def renewed_then_interrupted(lease_id: str) -> object:
        broker.renew = renew  # type: ignore[method-assign]
        lease = renew(lease_id)  # extended to 1090 and journaled

        def interrupted(reservations: Sequence[str], tx: Transaction) -> set[str]:
            ledger.still_held = still_held  # type: ignore[method-assign]
            raise KeyboardInterrupt  # the link's first read: a Ctrl-C at a store that hangs

        ledger.still_held = interrupted  # type: ignore[method-assign]
        return lease

    broker.renew = renewed_then_interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    assert next(lease for lease in broker.leases() if lease.id == "job1").expires_at == 1090.0
    decided = process.gated.decisions.get("job1")
    assert decided is not None
    assert [amount for _r, _u, amount in decided.reservations] == [240_000 + 120_000]
    world.clock.now += 55
    process.gated.release(world.trainer, "job1")
    assert world.spent() == 4 * 85 * 1000  # held 85 s, the extension's 30 s included
    assert world.remaining() == world.budget - world.spent()  # nothing left reserved


def test_a_link_interrupted_after_it_committed_is_not_written_twice(world: World) -> None:
    process = world.process
    # Queued around the gate: the first renewal's link writes the lease's row and its grant.
    process.broker.submit(GangRequest("job1", "team-a", 4, gpu_type="H100", holder=world.trainer.did))
    world.clock.now += 30
    gated = process.gated
    span = gated._outcome_span

    def interrupted(*args: object) -> None:  # after the link's commit
        gated._outcome_span = span  # type: ignore[method-assign]
        raise KeyboardInterrupt

    gated._outcome_span = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        gated.renew(world.trainer, "job1")
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"] == [
        ("lease_granted", allow.index)
    ]
    decided = gated.decisions.get("job1")
    assert decided is not None
    assert [amount for _r, _u, amount in decided.reservations] == [120_000]
