"""Regression review (b) of R91 (item 1): a request ``Broker.submit`` took and withdrew in its own
pass (``grant_check`` refusing it), whose journal write then failed or was interrupted, counted as
never taken: ``GatedBroker.submit`` closed its allow as an ``error`` and deleted its row, while
its ``Withdrawn`` event stayed in the broker. The next submit of the id drained that event and it
settled the NEW decision (``request_revoked``): the new lease ran unlinked and was never charged.
Now a request taken and ended in the call counts as taken (``Broker.undelivered``): its row stays
and its event closes its own decision."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import BrokerSnapshot, GangRequest, Withdrawn
from agentgate.errors import StoreError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def _withdrawn_then_unjournaled(world: World, raised: BaseException) -> None:
    """Make the next pass withdraw the request it is about to grant, and the journal write after
    it raise ``raised``, once each."""
    broker = world.process.broker
    journal = broker.journal
    assert journal is not None
    check, save = broker.grant_check, journal.save

    def refused_once(request: GangRequest) -> str | None:
        broker.grant_check = check
        return "refused once"

    def failed_once(snapshot: BrokerSnapshot) -> None:
        journal.save = save  # type: ignore[method-assign]
        raise raised

    broker.grant_check = refused_once
    journal.save = failed_once  # type: ignore[method-assign]


@pytest.mark.parametrize(
    "raised", [KeyboardInterrupt(), StoreError("database is locked")], ids=["ctrl-c", "store-error"]
)
def test_a_request_withdrawn_in_its_own_pass_is_closed_by_its_own_event(
    world: World, raised: BaseException
) -> None:
    process = world.process
    _withdrawn_then_unjournaled(world, raised)
    with pytest.raises(type(raised)):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert not process.broker.holds("job1")
    assert [type(e) for e in process.broker.undelivered()] == [Withdrawn]
    assert [type(e) for e in process.broker.undelivered()] == [Withdrawn]  # asking changes nothing
    assert process.gated.decisions.get("job1") is not None  # kept for its event
    assert [e for e in process.entries() if e.kind == "outcome"] == []

    answer = process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert answer.lease() is not None
    first, second = (e.index for e in process.entries() if e.kind == "allow")
    world.clock.now += 50
    process.gated.release(world.trainer, "job1")
    outcomes = [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"]
    assert outcomes == [("request_revoked", first), ("lease_granted", second), ("lease_released", second)]
    assert world.spent() == 4 * 50 * 1000  # the new lease is charged: 4 GPUs x 50 s
    assert world.remaining() == world.budget - world.spent()  # nothing left reserved


def test_reconcile_leaves_a_request_whose_end_is_still_in_the_broker_to_that_end(world: World) -> None:
    process = world.process
    _withdrawn_then_unjournaled(world, StoreError("database is locked"))
    with pytest.raises(StoreError):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert process.gated.reconcile() == []
    process.gated.advance()
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome"] == [
        ("request_revoked", allow.index)
    ]
    assert process.gated.decisions.get("job1") is None
    assert world.spent() == 0 and world.remaining() == world.budget
