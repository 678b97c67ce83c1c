"""GatedBroker (agentgate/dispatch/broker/_gated.py): GPU leases decided by the Gate and journalled
in the store. A lease lost in a restart is charged what was reserved for it, never more, and a
lease whose grant could not be recorded is restored from the journal and charged its time.
(The broker's other rules are in tests/test_broker*.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import test_dispatch_unrecorded_ends as second_dispatch
from test_broker_restart_budget import World, lease

from agentgate.dispatch.broker import GangRequest
from agentgate.errors import AuditError, StoreError
from agentgate.store import Store


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    made = World(store.url)
    yield made
    made.process.gate.close()


def _lose_the_journal(world: World) -> None:
    """The broker's journal loses its leases and queue (written before they were made)."""
    with world.process.store.transaction() as tx:
        tx.execute("DELETE FROM broker_leases")
        tx.execute("DELETE FROM broker_queue")


def _related(world: World, index: int) -> tuple[list[int], list[int]]:
    """The indexes ``explain`` shows with entry ``index`` and those ``referring`` gives."""
    audit = world.process.gate.audit
    return [e.index for e in audit.explain(index).related], [e.index for e in audit.referring(index)]


def test_a_granted_and_renewed_lease_lost_is_charged_what_was_reserved_never_more(world: World) -> None:
    gated = world.process.gated
    spent_before = world.spent()
    decision = gated.submit(world.trainer, lease("ft-1")).authorization.audit_index
    assert decision is not None
    world.clock.now += 30
    gated.renew(world.trainer, "ft-1")  # 2 GPUs x 30 s more, 1,000 per GPU-second
    (decided,) = gated.decisions.all()
    reserved = sum(amount for _r, _u, amount in decided.reservations)
    assert reserved == 120_000 + 60_000
    indexed = _related(world, decision)
    _lose_the_journal(world)
    after = world.restart()
    assert after.gated.reconcile() == ["ft-1"]
    lost = after.entries()[-1]
    assert (lost.status, lost.ref, lost.budget_delta) == ("lease_lost", decision, reserved)
    assert world.spent() - spent_before == reserved
    assert world.remaining() == world.budget - reserved
    assert after.gated.reconcile() == []  # twice in a row: nothing more
    assert world.spent() - spent_before == reserved
    assert after.gate.verify().ok
    # The lookup reconcile uses gives the same entries through the index and by scanning the log.
    explained, referring = _related(world, decision)
    assert explained[: len(indexed[0])] == indexed[0] and lost.index in referring
    after.gate.audit.refs_indexed = False  # a role that could not build audit_refs: the scan path
    assert _related(world, decision) == (explained, referring)
    renewal = next(e for e in after.entries() if e.kind == "allow" and e.index > decision)
    assert _related(world, renewal.index)[0] == [
        e.index for e in after.gate.audit.explain(renewal.index).related
    ]


def test_a_lease_queued_around_the_gate_and_renewed_is_charged_when_lost(world: World) -> None:
    process = world.process
    spent_before = world.spent()
    process.broker.submit(GangRequest("side", "team-a", 2, gpu_type="H100", holder=world.trainer.did))
    world.clock.now += 30
    process.gated.renew(world.trainer, "side")  # the lease runs 30 s more: 60,000 reserved
    (decided,) = process.gated.decisions.all()
    assert [amount for _r, _u, amount in decided.reservations] == [60_000]
    _lose_the_journal(world)
    after = world.restart()
    assert after.gated.reconcile() == ["side"]
    lost = after.entries()[-1]
    assert lost.status == "lease_lost" and "never held GPUs" not in lost.reasons[0]
    assert lost.budget_delta == 60_000 and world.spent() - spent_before == 60_000


def test_a_lease_whose_grant_could_not_be_recorded_is_charged_its_time_after_a_restart(
    tmp_path: Path,
) -> None:
    """The grant outcome is the event the store refused; the process stops before it is recorded.
    The journal has the lease: the restored broker keeps it (reconcile leaves it alone) and its
    end is charged the time it was held, although the log never got its grant."""
    world = World(str(tmp_path / "agentgate.db"))
    try:
        warm = world.process.gated.submit(world.trainer, lease("warm"))  # every table exists
        world.process.gated.release(world.trainer, "warm")
        spent_before = world.spent()
        with second_dispatch.grant_outcomes_refused(Path(world.url)), pytest.raises((StoreError, AuditError)):
            world.process.gated.submit(world.trainer, lease("ft-1"))
        after = world.restart()
        assert [held.id for held in after.broker.leases()] == ["ft-1"]
        assert after.gated.reconcile() == []
        world.clock.now += 90  # past its 60 s ttl
        after.gated.advance()
        decision = next(
            e
            for e in after.entries()
            if e.kind == "allow" and e.index > (warm.authorization.audit_index or 0)
        )
        ends = [e for e in after.entries() if e.ref == decision.index and e.kind == "outcome"]
        assert [(e.status, e.budget_delta) for e in ends] == [("lease_expired", 120_000)]
        assert world.spent() - spent_before == 120_000
        assert after.gate.verify().ok
    finally:
        world.process.gate.close()
