"""Review R85: the times of a snapshot that ``Broker.restore`` takes over (agentgate/dispatch/broker).

Restore checked a snapshot's ids, tenants and GPUs but none of its times, which the journal's
``load`` refuses since reviews R68 and R82: a ``taken_at`` of ``1e300`` or infinity moved the
default clock there, where a ``ttl_s`` added moves it no more (every lease ended in the call that
granted it), and a lease that expires at NaN was restored, never expired, and failed every
journal write. Now restore refuses each with ``BrokerError`` naming it, changing nothing, by the
very checks ``load`` makes (``taken_at_refused``, ``time_refused``).
"""

from __future__ import annotations

import dataclasses
import math
import re
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
from agentgate.errors import BrokerError
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


def _broker(**kw: object) -> Broker:
    return Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], **kw)  # type: ignore[arg-type]


def _a_lease(**times: float) -> BrokerSnapshot:
    source = _broker(clock=lambda: 1000.0)
    source.submit(GangRequest("job", "a", 2))
    return BrokerSnapshot(1000.0, (dataclasses.replace(source.leases()[0], **times),), ())


def _a_request(submitted_at: float = 1000.0, deadline: float = 2000.0) -> BrokerSnapshot:
    return BrokerSnapshot(1000.0, (), (QueuedRequest(GangRequest("wait", "a", 2), submitted_at, deadline),))


@pytest.mark.parametrize(
    ("snapshot", "named"),
    [
        pytest.param(BrokerSnapshot(1e300, (), ()), "its taken_at is 1e+300", id="taken_at-beyond-a-date"),
        pytest.param(BrokerSnapshot(math.inf, (), ()), "its taken_at is inf", id="taken_at-infinity"),
        pytest.param(BrokerSnapshot(math.nan, (), ()), "its taken_at is nan", id="taken_at-nan"),
        pytest.param(_a_lease(expires_at=math.nan), "lease 'job': expires_at must be", id="expires_at-nan"),
        pytest.param(_a_lease(granted_at=-math.inf), "lease 'job': granted_at must be", id="granted_at-inf"),
        pytest.param(_a_lease(notice_deadline=math.nan), "lease 'job': notice_deadline", id="notice-nan"),
        pytest.param(_a_request(submitted_at=math.inf), "request 'wait': submitted_at", id="submitted-inf"),
        pytest.param(_a_request(deadline=math.nan), "request 'wait': deadline must be", id="deadline-nan"),
    ],
)
def test_a_snapshot_time_that_is_none_is_refused_changing_nothing(
    snapshot: BrokerSnapshot, named: str
) -> None:
    broker = _broker()
    before = broker.clock()
    with pytest.raises(BrokerError, match=f"^snapshot: {re.escape(named)}"):
        broker.restore(snapshot)
    assert broker.leases() == [] and broker.queue() == [] and broker.clock() - before < 3600
    # Nothing changed: the broker still restores, and grants for its ttl_s.
    broker.restore(BrokerSnapshot(broker.clock(), (), ()))
    (granted,) = broker.submit(GangRequest("next", "a", 2))
    assert isinstance(granted, Granted) and broker.leases() == [granted.lease]


def test_a_snapshot_of_times_that_are_times_still_restores(tmp_path: Path) -> None:
    """The journal's own snapshot (a notified lease's deadline included), and a wait with no
    deadline, as a journal before review R36 saved a nominated request's."""
    now = [1000.0]
    store = SQLiteStore(tmp_path / "agentgate.db")
    try:
        source = _broker(clock=lambda: now[0], grace_s=30, journal=BrokerLeaseStore(store))
        source.submit(GangRequest("low", "a", 8))
        source.submit(GangRequest("high", "a", 8, priority=1))  # notifies "low"
        journal = BrokerLeaseStore(store)
        saved = journal.load()
        assert saved is not None and saved.leases[0].notice_deadline == 1030.0
        restored = _broker(clock=lambda: now[0], journal=journal)
        restored.restore(saved)
        assert restored.snapshot() == source.snapshot()
        old = _broker(clock=lambda: now[0])
        old.restore(_a_request(deadline=math.inf))
        assert [q.deadline for q in old.queue()] == [1000.0 + 3600]  # its timeout_s from its submission
    finally:
        store.close()
