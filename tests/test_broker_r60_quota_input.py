"""Review R60 of the broker's quota input (``TenantQuota``): a cohort that is not a name, text a
store cannot hold, and a borrowing limit without a cohort.

Each is refused with ``BrokerError`` naming the tenant when the quota is made; before, a list as
the cohort was a ``TypeError`` out of ``Broker(...)``, and the others were taken and meant
nothing (a quota no request could name, a borrowing limit that was ignored).
"""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"cohort": ["lab"]}, "cohort must be a cohort's name or None, got \\['lab'\\]"),
        ({"cohort": 7}, "cohort must be a cohort's name or None, got 7"),
        ({"cohort": ""}, "cohort must be a cohort's name or None, got ''"),
        ({"cohort": "lab\ud800"}, "the cohort is not valid Unicode text"),
        ({"tenant": "research\ud800"}, "the tenant is not valid Unicode text"),
    ],
)
def test_a_quota_whose_tenant_or_cohort_is_no_usable_name_is_refused(
    fields: dict[str, Any], match: str
) -> None:
    """Review R60: a quota whose cohort was a list raised TypeError (unhashable) out of Broker();
    an empty or non-text cohort, or a tenant or cohort with a lone surrogate, was taken."""
    quota: dict[str, Any] = {"tenant": "research", "nominal": 4, **fields}
    with pytest.raises(BrokerError, match=match):
        Broker(synthetic_topology(1, 8), [TenantQuota(**quota)])


def test_a_borrowing_limit_without_a_cohort_is_refused() -> None:
    """Review R60: TenantQuota("a", 4, borrowing_limit=4) was taken and the limit ignored: the
    tenant could never hold a fifth GPU, with nothing to say why."""
    with pytest.raises(BrokerError, match="quota of 'a': borrowing_limit needs a cohort"):
        TenantQuota("a", 4, borrowing_limit=4)


def test_a_quota_with_a_cohort_and_a_borrowing_limit_still_borrows() -> None:
    """The refusals above leave a well-formed quota as it was: a tenant of a cohort borrows up to
    its limit."""
    broker = Broker(
        synthetic_topology(1, 8),
        [TenantQuota("a", 4, borrowing_limit=2, cohort="lab"), TenantQuota("b", 4, cohort="lab")],
        clock=lambda: 0.0,
    )
    broker.submit(GangRequest("six", "a", 6))
    assert broker.usage("a") == 6
    with pytest.raises(BrokerError, match="may ever hold \\(6\\)"):
        broker.submit(GangRequest("seven", "a", 7))
