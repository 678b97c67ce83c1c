"""Review R89: a restored lease holds its whole gang (agentgate/dispatch/broker, store/broker_leases.py).

``Broker.restore`` checked that each lease's GPUs were "none, or a whole gang": none is right for
a waiting request that is not nominated, never for a lease. A lease of an 8-GPU gang holding no
GPUs was restored live, charging nothing, and its tenant (nominal 8) was granted another 8-GPU
gang beside it; the journal's ``load`` read such a row too. Now restore refuses it with
``BrokerError``, changing nothing ("a gang of the wrong size", as documented), and ``load``
refuses the row as ``MalformedRow`` naming it.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from agentgate.dispatch.broker import (
    Broker,
    BrokerSnapshot,
    GangRequest,
    Granted,
    QueuedRequest,
    TenantQuota,
    synthetic_topology,
)
from agentgate.errors import BrokerError, MalformedRow
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


def _broker(journal: BrokerLeaseStore | None = None) -> Broker:
    return Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=lambda: 1000.0, journal=journal)


def _lease_of(gpus: int) -> BrokerSnapshot:
    """The snapshot of an 8-GPU gang's lease, holding ``gpus`` of its GPUs."""
    source = _broker()
    source.submit(GangRequest("job", "a", 8))
    (lease,) = source.leases()
    return BrokerSnapshot(1000.0, (dataclasses.replace(lease, gpus=lease.gpus[:gpus]),), ())


@pytest.mark.parametrize("gpus", [0, 7])
def test_a_lease_holding_fewer_gpus_than_its_gang_is_not_restored(gpus: int) -> None:
    broker = _broker()
    with pytest.raises(BrokerError, match=rf"^snapshot: 'job' holds {gpus} GPUs for a gang of 8$"):
        broker.restore(_lease_of(gpus))
    assert broker.leases() == [] and broker.usage("a") == 0 and broker.free_gpus() == 8
    # Nothing changed: the whole lease restores, and the tenant is at its quota.
    broker.restore(_lease_of(8))
    assert broker.usage("a") == 8 and broker.free_gpus() == 0
    assert broker.submit(GangRequest("other", "a", 8)) == []


def test_a_waiting_request_still_restores_with_no_gpus_nominated() -> None:
    broker = _broker()
    broker.restore(BrokerSnapshot(1000.0, (), (QueuedRequest(GangRequest("wait", "a", 8), 1000.0, 2000.0),)))
    (granted,) = broker.advance()
    assert isinstance(granted, Granted) and len(granted.lease.gpus) == 8


def test_a_journal_row_of_a_lease_holding_no_gpus_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "agentgate.db"
    store = SQLiteStore(path)
    _broker(BrokerLeaseStore(store)).submit(GangRequest("job", "a", 8))
    store.close()
    db = sqlite3.connect(path)
    with db:
        (body,) = db.execute("SELECT body FROM broker_leases WHERE lease_id = 'job'").fetchone()
        db.execute(
            "UPDATE broker_leases SET body = ? WHERE lease_id = 'job'",
            (json.dumps({**json.loads(body), "gpus": []}),),
        )
    db.close()
    with SQLiteStore(path) as reopened, pytest.raises(MalformedRow) as refused:
        BrokerLeaseStore(reopened).load()
    assert str(refused.value).endswith(
        "broker_leases: the row of lease 'job' is malformed: lease 'job': holds 0 GPUs for a gang of 8"
    )
