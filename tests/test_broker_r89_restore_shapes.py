"""Review R89: the types of a snapshot's fields that ``Broker.restore`` takes over (agentgate/dispatch/broker).

Restore checked a snapshot's ids, tenants, GPUs and times, but not the types of a lease's request
and GPUs, nor of a waiting request's nominated GPUs and victims, nor that a queue item was a
``QueuedRequest``: each such field was a ``TypeError`` or an ``AttributeError``, and a victim that
was a list one raised after the leases were taken over, leaving the broker holding them and
refusing the right snapshot as "not empty". Now every field's type is checked before anything
changes: ``BrokerError`` naming the field, the broker as it was.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from agentgate.dispatch.broker import (
    Broker,
    BrokerSnapshot,
    GangRequest,
    QueuedRequest,
    TenantQuota,
    synthetic_topology,
)
from agentgate.errors import BrokerError


def _broker() -> Broker:
    return Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=lambda: 1000.0)


def _lease_snapshot() -> BrokerSnapshot:
    """A valid snapshot: one lease of 2 GPUs."""
    source = _broker()
    source.submit(GangRequest("job", "a", 2))
    return BrokerSnapshot(1000.0, tuple(source.leases()), ())


_LEASE = _lease_snapshot().leases[0]
_WAITING = QueuedRequest(GangRequest("w", "a", 2), 1000.0, 2000.0)


def _with_lease(**fields: object) -> BrokerSnapshot:
    return BrokerSnapshot(1000.0, (dataclasses.replace(_LEASE, **fields),), ())


def _with_waiting(**fields: object) -> BrokerSnapshot:
    """The valid lease, then a waiting request with ``fields``: a refusal must come before the
    lease is taken over."""
    return BrokerSnapshot(1000.0, (_LEASE,), (dataclasses.replace(_WAITING, **fields),))


@pytest.mark.parametrize(
    ("snapshot", "named"),
    [
        pytest.param(
            _with_lease(gpus=(["n000/g0"], ["n000/g1"])), "lease 'job': gpus must be", id="gpus-lists"
        ),
        pytest.param(_with_lease(gpus=None), "lease 'job': gpus must be", id="gpus-none"),
        pytest.param(
            _with_lease(request=None), "lease 'job': request must be a GangRequest", id="request-none"
        ),
        pytest.param(
            _with_lease(preempted_by=["p"]), "lease 'job': preempted_by must be", id="preempted_by-list"
        ),
        pytest.param(_with_lease(preempt_reason="spite"), "lease 'job': preempt_reason must be", id="reason"),
        pytest.param(_with_lease(level=["node"]), "lease 'job': level must be", id="level-list"),
        pytest.param(_with_waiting(nominated=None), "request 'w': nominated must be", id="nominated-none"),
        pytest.param(_with_waiting(victims=(["job"],)), "request 'w': victims must be", id="victims-lists"),
        pytest.param(
            _with_waiting(request=None), "queue[0]: request must be a GangRequest", id="queued-none"
        ),
        pytest.param(_with_waiting(draining="yes"), "request 'w': draining must be", id="draining-text"),
        pytest.param(
            BrokerSnapshot(1000.0, (_LEASE,), ("w",)), "queue[0] must be a QueuedRequest", id="queue-item"
        ),
        pytest.param(BrokerSnapshot(1000.0, ("job",), ()), "leases[0] must be a Lease", id="lease-item"),
        pytest.param(BrokerSnapshot(1000.0, (_LEASE,), None), "its queue must be a tuple", id="queue-none"),
    ],
)
def test_a_snapshot_field_of_the_wrong_type_is_refused_changing_nothing(
    snapshot: BrokerSnapshot, named: str
) -> None:
    broker = _broker()
    with pytest.raises(BrokerError, match=f"^snapshot: {re.escape(named)}"):
        broker.restore(snapshot)
    assert broker.leases() == [] and broker.queue() == [] and broker.free_gpus() == 8
    # Nothing changed: the right snapshot still restores.
    broker.restore(_lease_snapshot())
    assert [lease.id for lease in broker.leases()] == ["job"] and broker.free_gpus() == 6


def test_a_snapshot_that_is_none_is_refused() -> None:
    with pytest.raises(BrokerError, match=r"^snapshot must be a BrokerSnapshot, got None$"):
        _broker().restore(None)  # type: ignore[arg-type]
