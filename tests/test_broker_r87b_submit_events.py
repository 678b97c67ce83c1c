"""Regression review of R87: the events of the broker's clock in ``GatedBroker.submit`` and
``renew`` (agentgate/dispatch/broker/_gated.py, ``_delivered``).

R87 made every submit apply the broker's clock before its decision. The events that caused (an
expiry, a waiting request's ``Granted``) were audited, then returned by no call: not by the submit,
refused or allowed, nor by the next ``advance()``, so a waiting holder never learned it was granted.
A renewal's clock did the same since review R40. Now a submit the policy refuses leaves the broker
as it was, and every event a call takes from the broker is returned by that call or, where it
returns none, by the next call that returns events.
"""

from __future__ import annotations

from pathlib import Path

from test_broker_gated import Setup
from test_broker_r87c_lease_of_this_call import _old_lease_granted_by_a_renewal

from agentgate.dispatch.broker import (
    BrokerEvent,
    GangRequest,
    TimedOut,
    Withdrawn,
)


def _on(tmp_path: Path, nodes: int) -> Setup:
    """``Setup`` over a broker of ``nodes`` nodes of 8 GPUs, each tenant's quota 8."""
    return Setup(tmp_path).rebroker(nodes=nodes, team_a=8)


def _named(events: list[BrokerEvent] | tuple[BrokerEvent, ...]) -> list[tuple[str, str]]:
    return [
        (type(e).__name__, e.request.id if isinstance(e, TimedOut | Withdrawn) else e.lease.id)
        for e in events
    ]


def _expired_with_one_waiting(setup: Setup) -> None:
    """The trainer's lease "A" holds all 8 GPUs and expired; the other's "L" waits for them."""
    setup.gated.submit(setup.ids["trainer"], GangRequest("A", "x", 8, gpu_type="H100"))
    assert setup.gated.submit(setup.ids["other"], GangRequest("L", "x", 8, gpu_type="H100")).lease() is None
    setup.clock.now += 70  # "A" expired at 1060


def test_a_refused_submit_leaves_the_broker_and_its_events_to_the_next_call(tmp_path: Path) -> None:
    setup = _on(tmp_path, nodes=1)
    try:
        _expired_with_one_waiting(setup)

        refused = setup.gated.submit(setup.ids["chat"], GangRequest("z", "x", 1, gpu_type="H100"))

        assert not refused.allowed and refused.events == ()
        # Nothing moved: the broker still holds the expired lease until a call applies its clock.
        assert [lease.id for lease in setup.broker.leases()] == ["A"]
        assert [q.request.id for q in setup.broker.queue()] == ["L"]
        # ... and the waiting holder learns of its grant from advance().
        assert _named(setup.gated.advance()) == [("LeaseEnded", "A"), ("Granted", "L")]
    finally:
        setup.gate.close()


def test_an_allowed_submit_of_an_expired_id_returns_the_end_and_what_followed(tmp_path: Path) -> None:
    setup = _on(tmp_path, nodes=1)
    try:
        _expired_with_one_waiting(setup)

        again = setup.gated.submit(setup.ids["trainer"], GangRequest("A", "x", 8, gpu_type="H100"))

        assert again.allowed and again.lease() is None  # "L" came first: the new "A" waits
        assert _named(again.events) == [("LeaseEnded", "A"), ("Granted", "L")]
        assert setup.gated.advance() == []  # each event is returned once
    finally:
        setup.gate.close()


def test_the_events_of_a_renewals_clock_come_out_of_the_next_advance(tmp_path: Path) -> None:
    setup = _old_lease_granted_by_a_renewal(tmp_path)
    try:
        assert _named(setup.gated.advance()) == [("LeaseEnded", "A"), ("Granted", "L")]
        audited = [(e.status, e.resource) for e in setup.entries() if e.kind == "outcome"][-2:]
        assert audited == [("lease_expired", "gpu:h100"), ("lease_granted", "gpu:h100")]  # audited once
    finally:
        setup.gate.close()
