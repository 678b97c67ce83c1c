"""Regression review of R85: a waiting request's ``deadline`` of ``None`` in a snapshot that
``Broker.restore`` takes (agentgate/dispatch/broker).

R85's time checks let ``None`` through for ``deadline`` (a stored row's NULL, which the journal's
``load`` reads as ``inf``), but a ``QueuedRequest``'s "never times out" is ``inf``: restore then
compared ``None`` with a float, a ``TypeError`` after the snapshot's leases were taken over, and
the broker, no longer empty, refused a second restore. Now restore refuses it with ``BrokerError``
naming it, changing nothing.
"""

from __future__ import annotations

import math

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


def _snapshot(deadline: object) -> BrokerSnapshot:
    source = _broker()
    source.submit(GangRequest("job", "a", 2))
    waiting = QueuedRequest(GangRequest("wait", "a", 2), 1000.0, deadline)  # type: ignore[arg-type]
    return BrokerSnapshot(1000.0, tuple(source.leases()), (waiting,))


@pytest.mark.parametrize("deadline", [None, -math.inf, "2000"], ids=["none", "minus-inf", "text"])
def test_a_deadline_that_is_neither_a_time_nor_inf_is_refused_changing_nothing(deadline: object) -> None:
    broker = _broker()
    with pytest.raises(
        BrokerError, match=r"^snapshot: request 'wait': deadline must be a finite number or inf"
    ):
        broker.restore(_snapshot(deadline))
    assert broker.leases() == [] and broker.queue() == [] and broker.free_gpus() == 8
    broker.restore(_snapshot(2000.0))  # still empty: it restores
    assert [lease.id for lease in broker.leases()] == ["job"]


def test_a_deadline_of_inf_still_restores_as_never() -> None:
    broker = _broker()
    broker.restore(_snapshot(math.inf))
    assert [q.deadline for q in broker.queue()] == [1000.0 + 3600]  # its timeout_s from its submission
