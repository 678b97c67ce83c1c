"""Regression review of R91 (item 1): ``GatedBroker.submit`` left a request linked only when
``Broker.submit`` raised ``StoreError`` or an interrupt with the id held. ``Broker.submit`` queues
the request before its pass over the queue, and that pass can raise anything (the placement
policy, ``grant_check``): the allow of a request the broker kept, perhaps granted in that very
pass, was closed with an ``error`` outcome, its reservation returned and its row deleted, and the
lease then ran unlinked, never charged. Now whether the broker took this request is asked of the
broker, whatever was raised; a request queued on the ``Broker`` directly with the id meanwhile
(which ``Broker.submit`` refuses this one for) still closes this allow."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r88_direct_id_race import _outcomes
from test_broker_restart_budget import World

from agentgate.dispatch.broker import FreeIndex, GangRequest, Granted, PlacementPolicy
from agentgate.errors import BrokerError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}")
    yield made
    made.process.gate.close()


class _RaisingOnce:
    """A placement policy that raises once for ``request_id`` when armed, else places as ``real``
    (``never`` is never placed)."""

    def __init__(self, real: PlacementPolicy, request_id: str, never: str | None = None) -> None:
        self.real, self.request_id, self.never, self.armed = real, request_id, never, True

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        if self.armed and request.id == self.request_id:
            self.armed = False
            raise RuntimeError("placement bug")
        if request.id == self.never:
            return None
        return self.real.place(request, free, loosen=loosen)


def test_a_request_queued_before_its_pass_raised_stays_linked_and_is_charged(world: World) -> None:
    process = world.process
    process.broker.policy = _RaisingOnce(process.broker.policy, "job1")
    with pytest.raises(RuntimeError, match="placement bug"):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    assert process.broker.holds("job1")
    assert process.gated.decisions.get("job1") is not None  # still linked, its budget reserved
    assert _outcomes(world) == []
    assert [type(e) for e in process.gated.advance()] == [Granted]
    world.clock.now += 50
    process.gated.release(world.trainer, "job1")
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert _outcomes(world) == [("lease_granted", allow.index), ("lease_released", allow.index)]
    assert world.spent() == 4 * 50 * 1000  # 4 GPUs x 50 s at the policy's price


def test_a_request_granted_in_a_pass_that_then_raised_stays_linked(world: World) -> None:
    process = world.process
    policy = _RaisingOnce(process.broker.policy, "low", never="low")
    policy.armed = False
    process.broker.policy = policy
    process.gated.submit(world.trainer, GangRequest("low", "x", 2, gpu_type="H100", priority=0))  # waits
    policy.armed = True
    process.broker.locality_wait_s += 1  # a changed setting: the pass tries the whole queue
    with pytest.raises(RuntimeError, match="placement bug"):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100", priority=5))
    assert any(lease.id == "job1" for lease in process.broker.leases())
    assert process.gated.decisions.get("job1") is not None
    world.clock.now += 50
    process.gated.advance()
    process.gated.release(world.trainer, "job1")
    job1 = [e for e in process.entries() if e.kind == "allow"][1]
    assert [(e.status, e.ref) for e in process.entries() if e.kind == "outcome" and e.ref == job1.index] == [
        ("lease_granted", job1.index),
        ("lease_released", job1.index),
    ]
    assert world.spent() == 4 * 50 * 1000


def test_an_id_queued_directly_meanwhile_still_closes_this_allow(world: World) -> None:
    process = world.process
    broker = process.broker
    submit = broker.submit

    def raced(request: GangRequest, **kwargs: object) -> object:
        broker.submit = submit  # type: ignore[method-assign]
        submit(GangRequest("job1", "team-a", 2, gpu_type="H100"))  # queued around the gate first
        return submit(request, **kwargs)  # type: ignore[arg-type]

    broker.submit = raced  # type: ignore[method-assign]
    with pytest.raises(BrokerError, match="already live"):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert _outcomes(world)[0] == ("error", allow.index)
    assert process.gated.decisions.get("job1") is None
    assert world.spent() == 0 and world.remaining() == world.budget  # its reservation returned
