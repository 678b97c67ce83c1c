"""Review R87: ``GatedBroker.submit`` of an id whose lease or wait has ended by the clock
(agentgate/dispatch/broker/_gated.py).

``submit`` read the id's decision row before the broker applied its clock: a lease that had expired,
or a request whose ``timeout_s`` had passed, still had its row until another call ended it. Its
holder was told "already live" before any decision, and another holder was allowed by the Gate,
then refused with an ``error`` outcome. Now ``submit`` applies the clock first, audits what it
ended, and the id is free, as ``Broker.submit`` itself treats it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_broker_gated import Setup

from agentgate.dispatch.broker import GangRequest


def _expired_lease(setup: Setup) -> str:
    setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "x", 8, gpu_type="H100"))
    setup.clock.now += 120  # ttl_s 60: the lease expired at 1060
    return "lease_expired"


def _timed_out_wait(setup: Setup) -> str:
    for holder, request_id in (("trainer", "a-1"), ("trainer", "a-2"), ("other", "b-1")):
        setup.gated.submit(setup.ids[holder], GangRequest(request_id, "x", 8, gpu_type="H100"))
    waiting = setup.gated.submit(
        setup.ids["trainer"], GangRequest("ft-1", "x", 8, gpu_type="H100", timeout_s=10)
    )
    assert waiting.allowed and waiting.lease() is None  # the 24 GPUs are held: it waits
    setup.clock.now += 20  # its wait ran out; the leases (ttl_s 60) still run
    return "lease_timed_out"


@pytest.mark.parametrize("ended", [_expired_lease, _timed_out_wait], ids=["expired-lease", "timed-out-wait"])
@pytest.mark.parametrize("holder", ["trainer", "other"], ids=["same-holder", "other-holder"])
def test_an_id_the_clock_ended_is_free_to_submit_again(
    tmp_path: Path, ended: Callable[[Setup], str], holder: str
) -> None:
    setup = Setup(tmp_path)
    try:
        status = ended(setup)
        first = setup.gated.decisions.get("ft-1")  # the row the clock has not ended yet
        assert first is not None
        before = len(setup.entries())

        answer = setup.gated.submit(setup.ids[holder], GangRequest("ft-1", "x", 4, gpu_type="H100"))

        assert answer.allowed
        after = setup.entries()[before:]
        # The old request's end is audited against its own decision, before the new decision.
        assert [(e.kind, e.status, e.ref) for e in after[:1]] == [("outcome", status, first.audit_index)]
        assert [e.status for e in after if e.kind == "outcome"].count("error") == 0
        (again,) = [e for e in after if e.kind == "allow"]
        assert again.principal == setup.ids[holder].did
        linked = setup.gated.decisions.get("ft-1")
        assert linked is not None and linked.audit_index == again.index  # the new decision's row
    finally:
        setup.gate.close()
