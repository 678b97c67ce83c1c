"""Review R93 (brokerleases, item 1): a renewal whose link to its lease's decision failed with
the store's error (after ``Broker.renew`` extended the lease) raised it and dropped the link: the
extension was never charged and its reservation stayed ``reserved`` for ever. Now the link is kept
and written at the next call, before the lease's end settles it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_broker_restart_budget import World, lease

from agentgate.dispatch.broker import _lease_outcomes
from agentgate.errors import StoreError

PRICE_PER_GPU_SECOND = 1000  # the PRICED policy: 2 GPUs x 60 s reserve 120,000


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World("sqlite:///" + str(tmp_path / "a.db"))
    yield made
    made.process.gate.close()


def _link_fails_once(world: World) -> None:
    """The store's next transaction after ``Broker.renew`` returns (the renewal's link) fails,
    nothing written."""
    broker = world.process.broker
    store = world.process.gated.gate.store
    real_renew, real_transaction = broker.renew, store.transaction

    def failing(**_: Any) -> Any:
        store.transaction = real_transaction  # type: ignore[method-assign]
        raise StoreError("the connection to the store was lost before the transaction committed")

    def renew(lease_id: str) -> Any:
        renewed = real_renew(lease_id)
        store.transaction = failing  # type: ignore[method-assign]
        return renewed

    broker.renew = renew  # type: ignore[method-assign]


def _reserved(world: World) -> list[Any]:
    return list(
        world.process.gate.store.query("SELECT amount FROM budget_reservations WHERE state = 'reserved'")
    )


@pytest.mark.parametrize("end", ["release", "expiry"])
def test_a_renewal_whose_link_failed_is_charged_at_its_lease_end(world: World, end: str) -> None:
    gated = world.process.gated
    gated.submit(world.trainer, lease("ft-1"))  # granted at 1000, reserves 120,000
    world.clock.now += 30
    _link_fails_once(world)
    with pytest.raises(StoreError):  # renewed all the same (the docstring)
        gated.renew(world.trainer, "ft-1")
    assert [held.expires_at for held in world.process.broker.leases()] == [world.clock.now + 60]
    if end == "release":
        world.clock.now += 50
        gated.release(world.trainer, "ft-1")
        held_s = 80
    else:
        world.clock.now += 100
        gated.advance()
        held_s = 90  # to the renewed expiry, not the first one
    assert world.spent() == 2 * held_s * PRICE_PER_GPU_SECOND
    assert _reserved(world) == []  # the extension's reservation settled with the lease
    assert world.remaining() == world.budget - world.spent()
    assert gated.decisions.all() == []


def test_a_ctrl_c_as_the_link_is_first_kept_still_links_it(world: World) -> None:
    """Regression review of R93: a Ctrl-C handled as ``_link_kept`` began (before it kept the
    link) left nothing kept, and the handler wrote only the links kept already: the extension
    was never charged. The handler keeps the link first."""
    gated = world.process.gated
    gated.submit(world.trainer, lease("ft-1"))
    world.clock.now += 30
    code = _lease_outcomes._Recording._link_kept.__code__
    armed = [True]

    def tracer(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code and armed[0]:
            armed[0] = False
            raise KeyboardInterrupt  # as a pending SIGINT is handled on entering a function

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            gated.renew(world.trainer, "ft-1")
    finally:
        sys.settrace(None)
    assert not armed[0]
    world.clock.now += 50
    gated.release(world.trainer, "ft-1")
    assert world.spent() == 2 * 80 * PRICE_PER_GPU_SECOND
    assert _reserved(world) == []
