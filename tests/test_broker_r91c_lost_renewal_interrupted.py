"""Regression review (c) of R91 (an unconfirmed item of review (b), shown here): a renewal whose
lease ended as it was decided (``Broker.renew`` raising ``LeaseLost``) closes its allow with an
``error`` outcome in one transaction; that handler caught only the store's and the log's errors,
so an interrupt (a Ctrl-C at a store that hangs) in that transaction rolled it back and left the
renewal's allow with no outcome and its reservation held for ever, tied to nothing. Now the
allow is closed again before the interrupt is raised, as every other handler of ``renew`` does."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest, Lease
from agentgate.store import Transaction


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def test_an_interrupt_closing_a_lost_renewal_still_closes_it(world: World) -> None:
    process = world.process
    broker, audit = process.broker, process.gate.audit
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    world.clock.now += 30
    renew, lock = broker.renew, audit.lock

    def hung(tx: Transaction) -> None:  # a Ctrl-C at the store, in the allow's closing transaction
        audit.lock = lock  # type: ignore[method-assign]
        raise KeyboardInterrupt

    def ended_as_decided(lease_id: str) -> Lease:
        broker.renew = renew  # type: ignore[method-assign]
        world.clock.now = 1061.0
        audit.lock = hung  # type: ignore[method-assign]
        return renew(lease_id)

    broker.renew = ended_as_decided  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    job1, renewal = (e.index for e in process.entries() if e.kind == "allow")
    assert [e.status for e in process.entries() if e.kind == "outcome" and e.ref == renewal] == ["error"]
    assert world.remaining() == world.budget - 240_000  # the renewal's 120,000 returned
    process.gated.advance()  # the lease's end, left in the broker
    assert [e.status for e in process.entries() if e.kind == "outcome" and e.ref == job1] == [
        "lease_granted",
        "lease_expired",
    ]
    assert world.remaining() == world.budget - world.spent() == world.budget - 240_000


def test_an_interrupt_after_the_lost_renewal_closed_closes_it_once(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    process = world.process
    broker, store = process.broker, process.gate.store
    process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))  # until 1060
    world.clock.now += 30
    renew, transaction = broker.renew, store.transaction

    @contextmanager
    def committed_then_interrupted() -> Iterator[Transaction]:
        store.transaction = transaction  # type: ignore[method-assign]
        with transaction() as tx:
            yield tx
        raise KeyboardInterrupt  # a Ctrl-C right after the commit

    def ended_as_decided(lease_id: str) -> Lease:
        broker.renew = renew  # type: ignore[method-assign]
        world.clock.now = 1061.0
        try:
            return renew(lease_id)
        finally:
            store.transaction = committed_then_interrupted  # type: ignore[method-assign]

    broker.renew = ended_as_decided  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="agentgate.broker"), pytest.raises(KeyboardInterrupt):
        process.gated.renew(world.trainer, "job1")
    assert not caplog.records  # not closed twice: nothing failed
    _job1, renewal = (e.index for e in process.entries() if e.kind == "allow")
    assert [e.status for e in process.entries() if e.kind == "outcome" and e.ref == renewal] == ["error"]
    assert world.remaining() == world.budget - 240_000  # the renewal's 120,000 returned
