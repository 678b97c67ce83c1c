"""Review R88: ``Broker.restore`` finds a snapshot's repeated id in one pass.

The refusal of an id live twice searched for it with ``ids.count`` per id, quadratic in the
snapshot's leases and requests (20,000 requests, their repeat last: 3 s). The ids are now counted
once; the message is as it was, naming the first id (leases first, then the queue) that is live
more than once.
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


def _queue(ids: list[str]) -> tuple[QueuedRequest, ...]:
    return tuple(QueuedRequest(GangRequest(i, "a", 1), 1000.0, math.inf) for i in ids)


def test_the_first_id_listed_that_repeats_is_named() -> None:
    broker = _broker()
    with pytest.raises(BrokerError) as caught:
        broker.restore(BrokerSnapshot(1000.0, (), _queue(["x", "b", "b", "x"])))
    assert str(caught.value) == "snapshot: names 'x' twice (a lease or request id is live once)"
    assert broker.snapshot().queue == ()


def test_a_repeat_at_the_end_of_a_long_queue_is_named() -> None:
    ids = [f"r{i}" for i in range(5000)]
    with pytest.raises(BrokerError) as caught:
        _broker().restore(BrokerSnapshot(1000.0, (), _queue([*ids, ids[-1]])))
    assert str(caught.value) == "snapshot: names 'r4999' twice (a lease or request id is live once)"


class _CountedId(str):
    """An id that counts how often it is compared with another (hashing stays str's)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedId.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_finding_the_repeat_compares_ids_a_number_of_times_linear_in_them() -> None:
    ids = [_CountedId(f"r{i}") for i in range(400)]
    _CountedId.compared = 0
    with pytest.raises(BrokerError, match="names 'r399' twice"):
        _broker().restore(BrokerSnapshot(1000.0, (), _queue([*ids, _CountedId("r399")])))
    # ``ids.count`` per id compared each with every other: 160,000 times here.
    assert _CountedId.compared <= 10 * len(ids)
