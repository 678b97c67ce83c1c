"""Review R88d: ``GatedBroker.renew`` let ``TamperDetected`` out of its lost-lease path (a lease
that ended while its renewal was decided, whose ``error`` outcome is then recorded), where
docs/broker.md says ``LeaseLost``: a caller catching ``LeaseLost`` missed that its lease ended.
That path raises ``LeaseLost`` now, the ``TamperDetected`` its cause; where the renewal is
decided, before anything changed, ``TamperDetected`` still comes out as is (review R88c)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World, lease

from agentgate.errors import LeaseLost, TamperDetected


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(str(tmp_path / "agentgate.db"))
    assert made.process.gated.submit(made.trainer, lease("ft-1")).allowed  # t=1000..1060
    yield made
    made.process.gate.close()


def test_a_lease_lost_while_renewed_is_lease_lost_when_the_log_does_not_verify(world: World) -> None:
    gated = world.process.gated
    gate = world.process.gate
    authorize = gate.authorize
    world.clock.now += 59

    def tampered(*args: object, **kwargs: object) -> None:
        raise TamperDetected("audit log: entry 3 does not match its hash")

    def expiring(*args: object, **kwargs: object) -> object:
        decided = authorize(*args, **kwargs)  # type: ignore[arg-type]
        world.clock.now += 2  # the lease expired while its renewal was decided
        gate.audit.lock = tampered  # type: ignore[method-assign]  # and the log no longer verifies
        return decided

    gate.authorize = expiring  # type: ignore[method-assign]
    with pytest.raises(LeaseLost) as raised:
        gated.renew(world.trainer, "ft-1")
    assert isinstance(raised.value.__cause__, TamperDetected)
    assert "entry 3 does not match its hash" in str(raised.value.__cause__)
    assert all(held.id != "ft-1" for held in world.process.broker.leases())


def test_docs_say_lease_lost_there() -> None:
    docs = Path(__file__).resolve().parents[1] / "docs" / "broker.md"
    text = " ".join(docs.read_text().split())
    assert "one whose log does not verify then: `LeaseLost`, the `TamperDetected` its cause" in text
