"""Regression review (round c) of R87: a ``GatedBroker.submit`` of an id the clock ended runs
``Broker.end_due``, which frees the expired lease's GPUs without trying the queue. When the submit
then stopped (the policy refused it), ``next_deadline`` did not say now: a driver sleeping until
it left the GPUs idle beside a waiting request that fits, until that request's timeout. Now
``next_deadline`` is the clock's now until a call tries the queue.
"""

from __future__ import annotations

from pathlib import Path

from test_broker_r87b_submit_events import _expired_with_one_waiting, _on

from agentgate.dispatch.broker import (
    GangRequest,
    Granted,
)


def test_a_refused_submit_after_an_expiry_leaves_next_deadline_at_now(tmp_path: Path) -> None:
    setup = _on(tmp_path, nodes=1)
    gated = setup.gated
    try:
        _expired_with_one_waiting(setup)  # L waits and fits the GPUs A held
        refused = gated.submit(setup.ids["chat"], GangRequest("A", "x", 1, gpu_type="H100"))
        assert not refused.allowed
        assert setup.broker.free_gpus() == 8  # end_due ended A, the queue untried
        assert setup.broker.next_deadline() == setup.clock.now
        granted = [e.lease.id for e in gated.advance() if isinstance(e, Granted)]
        assert granted == ["L"]
        assert setup.broker.next_deadline() != setup.clock.now  # tried: L's expiry is next
    finally:
        setup.gate.close()
