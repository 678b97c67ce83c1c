"""Regression review of R91 (item 2): ``GatedBroker.renew`` linked the renewal's reservation to its
lease only when ``Broker.renew`` raised ``StoreError``. ``Broker.renew`` extends the lease before
its pass over the queue and its journal write, so a pass that raised (the placement policy,
``grant_check``) or an interrupt in the journal write (a Ctrl-C) left the lease renewed with the
extension's reservation tied to nothing: held for ever, and the lease charged no more than its
first reservation. Now the renewal is linked before whatever was raised is raised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import BrokerSnapshot, FreeIndex, GangRequest, PlacementPolicy


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


class _Policy:
    """Places as ``real``, ``job2`` never; raises once when armed."""

    def __init__(self, real: PlacementPolicy) -> None:
        self.real, self.armed = real, False

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        if self.armed:
            self.armed = False
            raise RuntimeError("placement bug")
        return None if request.id == "job2" else self.real.place(request, free, loosen=loosen)


def _pass_raises(world: World, policy: _Policy) -> None:
    """Make the pass of the next ``Broker.renew`` raise, once the renewal is decided."""
    broker = world.process.broker
    renew = broker.renew

    def raising(lease_id: str) -> object:
        broker.renew = renew  # type: ignore[method-assign]
        policy.armed = True
        broker.locality_wait_s += 1  # a changed setting: the pass tries the whole queue
        return renew(lease_id)

    broker.renew = raising  # type: ignore[method-assign]


def _journal_interrupted(world: World) -> None:
    """Make the journal write of the renewed lease raise ``KeyboardInterrupt``, once."""
    journal = world.process.broker.journal
    assert journal is not None
    save = journal.save

    def interrupted(snapshot: BrokerSnapshot) -> None:
        if any(lease.id == "job1" and lease.expires_at == 1090.0 for lease in snapshot.leases):
            journal.save = save  # type: ignore[method-assign]
            raise KeyboardInterrupt
        save(snapshot)

    journal.save = interrupted  # type: ignore[method-assign]


@pytest.mark.parametrize("raised", [RuntimeError, KeyboardInterrupt], ids=["pass-raised", "ctrl-c"])
def test_a_renewal_that_raised_after_the_broker_renewed_keeps_its_reservation_with_the_lease(
    world: World, raised: type[BaseException]
) -> None:
    process = world.process
    policy = _Policy(process.broker.policy)
    process.broker.policy = policy
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # granted at 1000
    process.gated.submit(world.trainer, GangRequest("job2", "x", 2, gpu_type="H100"))  # waits
    world.clock.now += 30
    if raised is RuntimeError:
        _pass_raises(world, policy)
    else:
        _journal_interrupted(world)
    with pytest.raises(raised):
        process.gated.renew(world.trainer, "job1")
    lease = next(held for held in process.broker.leases() if held.id == "job1")
    assert lease.expires_at == 1090.0  # renewed
    decided = process.gated.decisions.get("job1")
    assert decided is not None
    assert sum(amount for _r, _u, amount in decided.reservations) == 240_000 + 120_000  # linked
    world.clock.now += 55  # held 85 s in all
    process.gated.release(world.trainer, "job1")
    process.gated.release(world.trainer, "job2")
    assert world.spent() == 4 * 85 * 1000  # the extension charged
    assert world.remaining() == world.budget - world.spent()  # nothing left reserved for nothing
