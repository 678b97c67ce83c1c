"""Review R61 of the text the broker quotes in its errors.

A lease id, a tenant, a GPU type or a wrong-typed field comes from the caller; the broker quoted
each whole (``{value!r}``), so a 1 MB lease id given to ``release`` made a 1 MB ``LeaseLost``
message, which is logged, sent back over HTTP and recorded. Each is now cut to
``MAX_QUOTED_CHARS`` characters with its length said, and a value that is not text is quoted as
a bounded ``repr``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_broker import FakeClock
from test_broker_gated import Setup

from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, WorkloadHint, synthetic_topology
from agentgate.errors import BrokerError, LeaseLost

HUGE = "x" * 1_000_000
MOST = 600
"""Longer than any of these messages needs to be with its quoted text cut to 200 characters."""


def _broker() -> Broker:
    return Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=FakeClock())


def _raised(error: type[Exception], call: Callable[[], object]) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


def test_release_and_renew_of_a_megabyte_lease_id_quote_it_cut() -> None:
    """Review R61: ``Broker.release("x" * 10**6)`` raised a ``LeaseLost`` of 1,000,067 characters."""
    broker = _broker()
    for call in (broker.release, broker.renew):
        message = _raised(LeaseLost, lambda call=call: call(HUGE))  # type: ignore[misc]
        assert len(message) < MOST and "(1000000 characters)" in message, message[:MOST]


def test_a_lease_id_that_is_not_text_is_quoted_short() -> None:
    """Review R61: a list of a million ids was written out (``repr``) whole before being cut to
    80 characters; it is quoted as a bounded ``repr`` (``reprlib``), a few items each cut."""
    message = _raised(LeaseLost, lambda: _broker().release([HUGE] * 1000))  # type: ignore[arg-type]
    assert len(message) < MOST and message.startswith("lease ['xxx") and "a lease id is text" in message


def test_gated_release_and_renew_of_a_megabyte_lease_id_quote_it_cut(tmp_path: Path) -> None:
    """Review R61: ``GatedBroker.release`` and ``renew`` quoted an unknown id whole."""
    setup = Setup(tmp_path)
    try:
        trainer = setup.ids["trainer"]
        for call in (setup.gated.release, setup.gated.renew):
            message = _raised(LeaseLost, lambda call=call: call(trainer, HUGE))  # type: ignore[misc]
            assert len(message) < MOST and "(1000000 characters)" in message, message[:MOST]
    finally:
        setup.gate.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda: GangRequest("r", "a", HUGE),  # type: ignore[arg-type]
        lambda: GangRequest("r", "a", 1, priority=[0] * 100_000),  # type: ignore[arg-type]
        lambda: GangRequest("r", "a", [10**5000]),  # type: ignore[arg-type]
        lambda: GangRequest("r", "a", 1, hint={"kind": HUGE}),  # type: ignore[arg-type]
        lambda: GangRequest("r", "a", 1, topology=HUGE),  # type: ignore[arg-type]
        lambda: GangRequest("r", "a", 1, holder=[HUGE]),  # type: ignore[arg-type]
        lambda: GangRequest("r", "a", 1, gpu_type=b"x" * 1_000_000),  # type: ignore[arg-type]
        lambda: TenantQuota(HUGE, -1),
        lambda: TenantQuota(HUGE, 1, cohort=[HUGE]),  # type: ignore[arg-type]
        lambda: Broker(synthetic_topology(1, 8), [TenantQuota(HUGE, 1), TenantQuota(HUGE, 1)]),
    ],
    ids=[
        "gpus",
        "priority",
        "gpus_huge_int",
        "hint",
        "topology",
        "holder",
        "gpu_type",
        "quota",
        "cohort",
        "two_quotas",
    ],
)
def test_a_request_or_quota_refused_quotes_the_callers_text_cut(make: Callable[[], object]) -> None:
    """Review R61: a wrong-typed field, or a megabyte tenant, was quoted whole in the
    ``BrokerError`` that refused it."""
    message = _raised(BrokerError, make)
    assert len(message) < MOST, message[:MOST]


def test_a_megabyte_tenant_that_has_a_quota_is_quoted_cut_when_its_request_cannot_fit() -> None:
    """Review R61: a request above what its tenant may ever hold quoted the tenant whole."""
    broker = Broker(synthetic_topology(1, 8), [TenantQuota(HUGE, 2)], clock=FakeClock())
    message = _raised(BrokerError, lambda: broker.submit(GangRequest("r", HUGE, 4, hint=WorkloadHint())))
    assert "may ever hold" in message and len(message) < MOST, message[:MOST]
