"""Review R93: one ``GatedBroker`` per broker, enforced. Until then a second one on the same
``Broker`` took its ``grant_check`` over without a word: it found no decision of the first's
requests in its own store, and a waiting request of a revoked grant was granted GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_restart_budget import World, lease

from agentgate.dispatch.broker import GatedBroker, Granted, Withdrawn
from agentgate.errors import BrokerError


def test_a_second_gated_broker_on_one_broker_is_refused_and_the_first_still_withdraws_revoked_requests(
    tmp_path: Path,
) -> None:
    world = World(f"sqlite:///{tmp_path / 'ag.db'}", budget=10_000_000)
    process = world.process
    try:
        assert process.gated.submit(world.trainer, lease("job1", gpus=8)).lease() is not None
        waiting = process.gated.submit(world.trainer, lease("job2", gpus=4))
        assert waiting.allowed and waiting.lease() is None
        with pytest.raises(BrokerError, match="one GatedBroker per broker"):
            GatedBroker(process.gate, process.broker, name="other")
        process.gate.revoke(world.trainer.grant_id)
        events = process.gated.release(world.trainer, "job1")
        assert [e.request.id for e in events if isinstance(e, Withdrawn)] == ["job2"]
        assert not [e for e in events if isinstance(e, Granted)]
    finally:
        process.gate.close()
