"""The refusal of a second broker under a name another process writes does not advise another
name for the same GPUs (review R96): two names over one cluster grant its GPUs twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import NotWriter
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


def test_the_writer_refusal_says_another_name_is_for_another_cluster(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "agentgate.db")
    try:
        quotas = [TenantQuota("team-a", 16)]
        first = Broker(synthetic_topology(nodes=1, gpus_per_node=8), quotas, journal=BrokerLeaseStore(store))
        first.submit(GangRequest("job-a", "team-a", 8))
        second = Broker(synthetic_topology(nodes=1, gpus_per_node=8), quotas, journal=BrokerLeaseStore(store))
        with pytest.raises(NotWriter) as refused:
            second.submit(GangRequest("job-b", "team-a", 8))
        message = str(refused.value)
        assert "give this broker another name" not in message
        assert "another name is only for another cluster's GPUs" in message
    finally:
        store.close()
