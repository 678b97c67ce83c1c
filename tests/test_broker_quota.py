"""Quota accounting (agentgate/dispatch/broker/_quota.py) as Kueue's cohorts: nominal quota,
borrowing, borrowing limit, reclaim; through the broker's preemption a tenant never holds more GPUs
than its quota allows, counting the leases it still holds for their grace."""

from __future__ import annotations

import pytest
from test_broker import FakeClock

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    TenantQuota,
    synthetic_topology,
)
from agentgate.dispatch.broker import TenantQuota as BrokerQuota
from agentgate.dispatch.broker._quota import QuotaBook
from agentgate.errors import BrokerError


def lab(borrowing_limit: int | None = None) -> QuotaBook:
    return QuotaBook(
        [
            TenantQuota("a", 8, borrowing_limit=borrowing_limit, cohort="lab"),
            TenantQuota("b", 4, cohort="lab"),
            TenantQuota("solo", 2),
        ]
    )


def test_without_a_cohort_a_tenant_stays_within_its_nominal_quota() -> None:
    book = lab()
    assert book.fits("solo", 2) and not book.fits("solo", 3)
    book.charge("solo", 2)
    assert not book.fits("solo", 1)
    assert book.ceiling("solo") == 2


def test_a_tenant_borrows_what_its_cohort_leaves_unused() -> None:
    book = lab()
    assert book.fits("a", 12) and not book.fits("a", 13)
    book.charge("b", 3)
    assert book.fits("a", 9) and not book.fits("a", 10)
    assert book.ceiling("a") == 12


def test_borrowing_limit_caps_borrowing() -> None:
    book = lab(borrowing_limit=1)
    assert book.fits("a", 9) and not book.fits("a", 10)
    assert book.ceiling("a") == 9


def test_released_usage_counts_as_gone() -> None:
    book = lab()
    book.charge("a", 12)
    assert not book.fits("b", 1)
    assert book.fits("b", 4, {"a": 4})
    assert not book.fits("b", 4, {"a": 3})


def test_reclaim_only_from_a_borrowing_cohort_member_by_a_tenant_within_nominal() -> None:
    book = lab()
    book.charge("a", 10)  # borrows 2
    assert book.borrowed("a") == 2
    assert book.may_reclaim_from("b", 2, "a")
    assert not book.may_reclaim_from("b", 5, "a")  # b would itself be borrowing
    assert not book.may_reclaim_from("solo", 1, "a")  # not in the cohort
    book.charge("a", -2)
    assert not book.may_reclaim_from("b", 2, "a")  # a no longer borrows


def test_unknown_tenants_and_duplicate_quotas_are_refused() -> None:
    with pytest.raises(BrokerError, match="unknown tenant"):
        lab().used("nobody")
    with pytest.raises(BrokerError, match="two quotas"):
        QuotaBook([TenantQuota("a", 1), TenantQuota("a", 2)])


def test_a_gang_larger_than_its_cohort_is_refused_at_submit_whatever_its_borrowing_limit() -> None:
    """Kills: ``QuotaBook.ceiling`` ignoring the cohort when a borrowing limit is set (a 20-GPU
    gang of a tenant allowed to borrow 100 in a 16-GPU cohort was queued, to wait for ever for
    GPUs its cohort can never lend, instead of refused).
    Rule: a tenant may never hold more than the lesser of its nominal plus borrowing limit and
    its cohort's nominal total; a larger gang is a ``BrokerError`` at submit, changing nothing."""
    from agentgate.errors import BrokerError

    quotas = [BrokerQuota("x", 8, borrowing_limit=100, cohort="lab"), BrokerQuota("y", 8, cohort="lab")]
    broker = Broker(synthetic_topology(3, 8), quotas, clock=FakeClock())
    with pytest.raises(BrokerError, match=r"may ever hold \(16\)"):
        broker.submit(GangRequest("big", "x", 20))
    assert broker.queue() == [] and broker.free_gpus() == 24


# --- through preemption: a tenant never holds more GPUs than its quota allows, counting the leases
# it still holds for their grace ----------------------------------------------------------------


def test_a_tenant_preempting_its_own_lease_while_another_is_reclaimed_stays_within_its_quota() -> None:
    """R17 (left open there): a request nominated by preemption was granted as soon as its
    victims ended, without counting its tenant's other notified leases, still held for their
    grace: research (at most 12 GPUs) held its new gang and its reclaimed lease, 16, for the
    rest of that lease's 300 s grace. It now waits for them, and gets its GPUs when they end."""
    from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology

    now = [0.0]
    quotas = [
        TenantQuota("research", nominal=8, cohort="lab", borrowing_limit=4),
        TenantQuota("prod", nominal=8, cohort="lab"),
    ]
    broker = Broker(synthetic_topology(4, 8), quotas, clock=lambda: now[0], ttl_s=600.0, grace_s=120.0)
    broker.submit(GangRequest("rB", "research", 8, priority=0, grace_s=300))
    broker.submit(GangRequest("rA", "research", 4, priority=1, grace_s=10))
    broker.submit(GangRequest("p1", "prod", 8))  # reclaims rB (300 s of grace)
    now[0] = 1.0
    broker.submit(GangRequest("rC", "research", 8, priority=2))  # preempts rA (10 s of grace)

    def research() -> int:
        return sum(len(lease.gpus) for lease in broker.leases() if lease.tenant == "research")

    for t in range(2, 330, 5):
        now[0] = float(t)
        broker.advance()
        assert research() <= 12, (t, sorted(lease.id for lease in broker.leases()))
    assert sorted(lease.id for lease in broker.leases()) == ["p1", "rC"] and broker.queue() == []
