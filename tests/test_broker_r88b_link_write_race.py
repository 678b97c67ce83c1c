"""Review R88, again: ``GatedBroker.submit`` asked whether the id was taken at the broker right
after the Gate's decision, but the decision's link (``decisions.add``, a store commit of its own)
came between that question and ``Broker.submit``. A request queued on the ``Broker`` directly
while the link was written, and ended by the clock meanwhile, was ended by ``Broker.submit`` and
recorded against the new decision: its row deleted, the new reservation settled at the old
lease's time, the new lease granted unlinked and never charged. The id is now asked about again
after the link is written, with no store write before ``Broker.submit``: the allowed request is
refused (``BrokerError``: already live), the row just added forgotten, its reservation returned
and its allow closed with an ``error`` outcome.

The clock is moved inside ``decisions.add``, as the link's own commit moves it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_broker_r88_direct_id_race import _outcomes, world  # noqa: F401 (the fixture)
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest, LeaseEnded
from agentgate.errors import BrokerError


def _while_the_link_is_written(world: World, then: Callable[[], None]) -> None:  # noqa: F811 (the fixture)
    """Make the next decision's link run ``then`` once it is written (its time passing)."""
    decisions = world.process.gated.decisions
    add = decisions.add

    def slow(*args: object, **kwargs: object) -> bool:
        decisions.add = add  # type: ignore[method-assign]
        added = add(*args, **kwargs)  # type: ignore[arg-type]
        then()
        return added

    decisions.add = slow  # type: ignore[method-assign]


def test_an_id_queued_directly_while_the_link_is_written_is_refused_not_ended_against_it(
    world: World,  # noqa: F811 (the fixture)
) -> None:
    process = world.process

    def queue_and_expire() -> None:
        process.broker.submit(GangRequest("A", "team-a", 2, gpu_type="H100", holder="direct", ttl_s=1))
        world.clock.now += 2

    _while_the_link_is_written(world, queue_and_expire)
    with pytest.raises(BrokerError, match="'A' is already live"):
        process.gated.submit(world.trainer, GangRequest("A", "x", 4, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    assert _outcomes(world) == [("error", allow.index)]  # the refused allow is closed
    assert process.gated.decisions.get("A") is None  # the row just added is forgotten
    assert world.spent() == 0 and world.remaining() == world.budget  # its reservation returned
    ended = [e for e in process.gated.advance() if isinstance(e, LeaseEnded)]
    assert [(e.lease.id, e.lease.request.holder) for e in ended] == [("A", "direct")]
    assert _outcomes(world)[1:] == [("lease_expired", None)]  # linked to no decision
    assert process.broker.leases() == []


def test_an_id_queued_directly_while_the_link_is_written_and_still_live_is_refused(world: World) -> None:  # noqa: F811 (the fixture)
    process = world.process

    def queue() -> None:
        process.broker.submit(GangRequest("A", "team-a", 2, gpu_type="H100", holder="direct"))

    _while_the_link_is_written(world, queue)
    with pytest.raises(BrokerError, match="'A' is already live"):
        process.gated.submit(world.trainer, GangRequest("A", "x", 4, gpu_type="H100"))
    assert process.gated.decisions.get("A") is None
    assert [lease.request.holder for lease in process.broker.leases()] == ["direct"]
    assert world.spent() == 0 and world.remaining() == world.budget
