"""Regression review (round c) of R87: an allowed ``GatedBroker.submit``'s events start with the
undelivered events of earlier calls, and ``GatedRequest.lease()`` took the first ``Granted`` with
the request's id, which could be the grant of an earlier request with that id (granted during a
renewal's clock, expired since): the old lease was returned whether the new request was granted
or waits. Now it is the grant that no end of it follows in those events.
"""

from __future__ import annotations

from pathlib import Path

from test_broker_gated import Setup

from agentgate.dispatch.broker import (
    GangRequest,
    Granted,
)


def _old_lease_granted_by_a_renewal(tmp_path: Path) -> Setup:
    """Two nodes of 8 GPUs: ``other``'s ``L`` is granted at 1030 by ``trainer``'s renewal, which
    returns no events, and expires at 1090."""
    setup = Setup(tmp_path).rebroker(nodes=2, team_a=8)
    gated = setup.gated
    gated.submit(setup.ids["trainer"], GangRequest("r", "x", 8, gpu_type="H100"))
    gated.submit(setup.ids["other"], GangRequest("A", "x", 8, gpu_type="H100", ttl_s=20))
    assert gated.submit(setup.ids["other"], GangRequest("L", "x", 8, gpu_type="H100")).lease() is None
    setup.clock.now = 1030.0
    gated.renew(setup.ids["trainer"], "r")  # A expired at 1020: this grants L
    return setup


def test_lease_is_the_grant_of_this_request_not_an_earlier_one_with_its_id(tmp_path: Path) -> None:
    setup = _old_lease_granted_by_a_renewal(tmp_path)
    try:
        setup.clock.now = 1100.0  # L (and r) expired at 1090
        again = setup.gated.submit(setup.ids["other"], GangRequest("L", "x", 8, gpu_type="H100"))
        grants = [e.lease.granted_at for e in again.events if isinstance(e, Granted) and e.lease.id == "L"]
        assert grants == [1030.0, 1100.0]  # the old grant is delivered first
        lease = again.lease()
        assert lease is not None and lease.granted_at == 1100.0
        assert lease in setup.broker.leases()
    finally:
        setup.gate.close()


def test_lease_is_none_when_this_request_waits_behind_an_earlier_grant_of_its_id(tmp_path: Path) -> None:
    setup = _old_lease_granted_by_a_renewal(tmp_path)
    try:
        setup.clock.now = 1085.0
        setup.gated.renew(setup.ids["trainer"], "r")  # r runs to 1145
        trainer = setup.ids["trainer"].did  # s, queued on the broker directly, waits ahead of a new L
        setup.broker.submit(GangRequest("s", "team-a", 8, gpu_type="H100", holder=trainer))
        setup.clock.now = 1100.0  # the old L expired at 1090
        again = setup.gated.submit(setup.ids["other"], GangRequest("L", "x", 8, gpu_type="H100"))
        assert again.allowed
        assert any(isinstance(e, Granted) and e.lease.id == "L" for e in again.events)  # the old one
        assert [q.request.id for q in setup.broker.queue()] == ["L"]
        assert again.lease() is None
    finally:
        setup.gate.close()
