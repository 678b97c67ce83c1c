"""Review R88: ``GatedBroker.renew`` raised the store's ``StoreError`` as is when the store failed
before the broker renewed anything (the renewal's decision could not be written, or the backlog of
outcomes an earlier call left could not be recorded), though the docs say a ``StoreError`` from
``renew`` always means renewed: a holder following them worked past the old expiry and lost its
GPUs to another gang. Now such a failure is ``NotRenewed`` (a ``BrokerError``, the store's error its
cause), and ``StoreError`` is left to a renewal the broker made. A lease that ends while its
renewal is decided is ``LeaseLost`` even when the store refuses to close the renewal's allow.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from test_broker_restart_budget import World, lease
from test_dispatch_unrecorded_ends import fault

from agentgate.errors import BrokerError, LeaseLost, NotRenewed, StoreError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(str(tmp_path / "agentgate.db"))
    assert made.process.gated.submit(made.trainer, lease("ft-1")).allowed  # t=1000..1060: 120,000
    yield made
    made.process.gate.close()


def _expiry(world: World, lease_id: str) -> float:
    return next(held.expires_at for held in world.process.broker.leases() if held.id == lease_id)


def test_a_renewal_whose_decision_cannot_be_written_is_not_renewed_and_says_so(world: World) -> None:
    gated = world.process.gated
    world.clock.now += 50
    with fault(Path(world.url), "budget_reservations", "INSERT"), pytest.raises(NotRenewed) as raised:
        gated.renew(world.trainer, "ft-1")
    assert not isinstance(raised.value, StoreError) and isinstance(raised.value, BrokerError)
    assert isinstance(raised.value.__cause__, StoreError)
    assert "'ft-1' was not renewed" in str(raised.value) and "r41 injected fault" in str(raised.value)
    assert _expiry(world, "ft-1") == 1060.0  # not renewed: it ends when it did
    assert world.remaining() == world.budget - 120_000  # nothing reserved for it
    assert gated.renew(world.trainer, "ft-1").expires_at == 1110.0  # once the store writes


def test_a_renewal_behind_an_unrecorded_backlog_is_not_renewed_and_says_so(world: World) -> None:
    gated = world.process.gated
    assert gated.submit(world.trainer, lease("short", gpus=1, ttl_s=10)).allowed  # ends at 1010
    world.clock.now += 20
    with fault(Path(world.url), "broker_decisions", "DELETE"):
        with pytest.raises(StoreError):
            gated.advance()  # the broker ended "short"; its outcome could not be recorded
        with pytest.raises(NotRenewed, match="'ft-1' was not renewed"):
            gated.renew(world.trainer, "ft-1")
    assert _expiry(world, "ft-1") == 1060.0
    assert gated.renew(world.trainer, "ft-1").expires_at == 1080.0


def _renewed_as_it_ends(world: World, then: AbstractContextManager[object]) -> LeaseLost:
    """Renews ``ft-1`` (ending at 1060) at 1059, the lease ending while its renewal is decided and
    ``then`` entered there (left once ``renew`` is done); the ``LeaseLost`` it raised."""
    gated = world.process.gated
    gate = world.process.gate
    authorize = gate.authorize
    world.clock.now += 59

    def expiring(*args: object, **kwargs: object) -> object:
        decided = authorize(*args, **kwargs)  # type: ignore[arg-type]
        world.clock.now += 2  # the lease expired while its renewal was decided
        then.__enter__()
        return decided

    gate.authorize = expiring  # type: ignore[method-assign]
    try:
        with pytest.raises(LeaseLost) as raised:
            gated.renew(world.trainer, "ft-1")
    finally:
        then.__exit__(None, None, None)
        gate.authorize = authorize  # type: ignore[method-assign]
    return raised.value


def test_a_lease_that_ends_while_renewed_is_lost_even_when_its_allow_cannot_be_closed(world: World) -> None:
    # the store refuses to return the renewal's reservation
    lost = _renewed_as_it_ends(world, fault(Path(world.url), "budget_reservations", "UPDATE"))
    assert isinstance(lost.__cause__, StoreError)
