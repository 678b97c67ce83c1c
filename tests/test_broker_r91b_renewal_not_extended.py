"""Regression review (b) of R91 (unconfirmed item): ``GatedBroker.renew`` linked the renewal's
reservation to its lease whatever ``Broker.renew`` raised, also where it raised before it extended
the lease (the lease ended as the renewal was decided and the pass over the queue then raised, or
an interrupt waiting for the broker): the renewal's allow had no outcome, and ``reconcile`` would
have charged its reservation whole with the lease's. Now whether the lease was extended is told by
its expiry: one that was not closes the renewal's allow with an ``error`` outcome, its reservation
returned, before what was raised is raised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r91_renewal_raised import _Policy
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def _outcomes(world: World, ref: int) -> list[str | None]:
    return [e.status for e in world.process.entries() if e.kind == "outcome" and e.ref == ref]


def test_a_lease_that_ended_before_the_broker_renewed_it_closes_the_renewal(world: World) -> None:
    process = world.process
    broker = process.broker
    policy = _Policy(broker.policy)
    broker.policy = policy
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    process.gated.submit(world.trainer, GangRequest("job2", "x", 2, gpu_type="H100"))  # waits
    world.clock.now += 30
    renew = broker.renew

    def expired_then_raised(lease_id: str) -> object:
        broker.renew = renew  # type: ignore[method-assign]
        world.clock.now = 1061.0  # the lease ends as the renewal was decided
        policy.armed = True
        broker.locality_wait_s += 1  # a changed setting: the pass tries the whole queue
        return renew(lease_id)

    broker.renew = expired_then_raised  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="placement bug"):
        process.gated.renew(world.trainer, "job1")
    job1, _job2, renewal = (e.index for e in process.entries() if e.kind == "allow")
    assert _outcomes(world, renewal) == ["error"]
    decided = process.gated.decisions.get("job1")
    assert decided is not None and [a for _r, _u, a in decided.reservations] == [240_000]
    process.gated.advance()  # the lease's end, left in the broker
    assert _outcomes(world, job1) == ["lease_granted", "lease_expired"]
    process.gated.release(world.trainer, "job2")
    assert world.spent() == 4 * 60 * 1000  # held to its expiry, not renewed
    assert world.remaining() == world.budget - world.spent()  # the renewal's reservation returned


def test_an_interrupt_before_the_broker_renewed_closes_the_renewal(world: World) -> None:
    process = world.process
    broker = process.broker
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    world.clock.now += 30
    renew = broker.renew

    def interrupted(lease_id: str) -> object:  # a Ctrl-C waiting for the broker's lock
        broker.renew = renew  # type: ignore[method-assign]
        raise KeyboardInterrupt

    broker.renew = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    assert next(lease for lease in broker.leases() if lease.id == "job1").expires_at == 1060.0
    _job1, renewal = (e for e in process.entries() if e.kind == "allow")
    closed = [e for e in process.entries() if e.kind == "outcome" and e.ref == renewal.index]
    assert [(e.status, list(e.reasons)) for e in closed] == [
        (
            "error",
            ["lease 'job1' was not renewed: interrupted (KeyboardInterrupt) before the broker renewed it"],
        )
    ]
    decided = process.gated.decisions.get("job1")
    assert decided is not None and [a for _r, _u, a in decided.reservations] == [240_000]
    assert world.remaining() == world.budget - 240_000  # the renewal's 120,000 returned
