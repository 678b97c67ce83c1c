"""Regression review of R85: a refused value holding an integer of more digits than Python writes
(agentgate/dispatch/broker).

The broker's refusals of a number (``shown_number``) quoted anything but a large integer by its
plain ``repr``: R85's new checks of ``Broker.restore``, and ``GangRequest``'s and ``Broker``'s own
checks of a time, raised a bare ``ValueError`` for a list holding an integer of 5,000 digits, the
refusal itself failing to write it. Now each is the ``BrokerError`` it was meant to be, quoting the
value bounded (``quoted``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from agentgate.dispatch.broker import Broker, BrokerSnapshot, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError

_HUGE = [10**5000]
_SHOWN = "a list holding an integer of more than 4300 digits"


def _broker(**kw: object) -> Broker:
    return Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], **kw)  # type: ignore[arg-type]


def _restore_taken_at() -> None:
    _broker().restore(BrokerSnapshot(_HUGE, (), ()))  # type: ignore[arg-type]


def _restore_expires_at() -> None:
    source = _broker(clock=lambda: 1000.0)
    source.submit(GangRequest("job", "a", 2))
    lease = dataclasses.replace(source.leases()[0], expires_at=_HUGE)
    _broker().restore(BrokerSnapshot(1000.0, (lease,), ()))


@pytest.mark.parametrize(
    ("call", "named"),
    [
        pytest.param(_restore_taken_at, "snapshot: its taken_at is", id="restore-taken_at"),
        pytest.param(
            _restore_expires_at, "snapshot: lease 'job': expires_at must be", id="restore-expires_at"
        ),
        pytest.param(lambda: GangRequest("x", "a", 1, ttl_s=_HUGE), "request 'x': ttl_s", id="request-ttl_s"),  # type: ignore[arg-type]
        pytest.param(lambda: _broker(grace_s=_HUGE), "broker grace_s", id="broker-grace_s"),
    ],
)
def test_a_value_holding_a_huge_integer_is_refused_quoted_bounded(
    call: Callable[[], object], named: str
) -> None:
    with pytest.raises(BrokerError) as refused:
        call()
    message = str(refused.value)
    assert message.startswith(named) and _SHOWN in message and len(message) < 300
