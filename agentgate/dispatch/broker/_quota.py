"""GPU quota accounting as Kueue does it for one resource: nominal quota, cohorts, borrowing.

A tenant may hold up to its ``nominal`` quota, and borrow beyond it, up to ``borrowing_limit``,
what the other tenants of its cohort leave unused: a request of ``n`` GPUs fits when

    used(t) + n <= nominal(t) + borrowing_limit(t)            (no cohort: <= nominal(t))
    used(cohort) + n <= sum of nominal(m) over the cohort's members m

A tenant above its nominal quota is *borrowing*; its leases are what a lender may reclaim.

A lease being preempted stops counting as *used* at its notice (the preemptor's reservation takes
its place), but its GPUs are *leaving* until it ends: a new grant counts them too
(``fits(..., with_leaving=True)``), so that no tenant or cohort holds more than its quota allows
during a victim's checkpoint grace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentgate.dispatch.broker._model import TenantQuota
from agentgate.dispatch.broker._quoting import quoted
from agentgate.errors import BrokerError


class QuotaBook:
    """Usage of each tenant and cohort against their quotas. Not thread-safe: the broker locks.

    Raises ``BrokerError`` on construction when a tenant has two quotas.
    """

    def __init__(self, quotas: Sequence[TenantQuota]) -> None:
        self._quotas: dict[str, TenantQuota] = {}
        for quota in quotas:
            if quota.tenant in self._quotas:
                raise BrokerError(f"tenant {quoted(quota.tenant)} has two quotas")
            self._quotas[quota.tenant] = quota
        self._cohort_nominal: dict[str, int] = {}
        for quota in self._quotas.values():
            if quota.cohort is not None:
                self._cohort_nominal[quota.cohort] = self._cohort_nominal.get(quota.cohort, 0) + quota.nominal
        self._used = dict.fromkeys(self._quotas, 0)
        self._cohort_used = dict.fromkeys(self._cohort_nominal, 0)
        self._leaving = dict.fromkeys(self._quotas, 0)
        self._cohort_leaving = dict.fromkeys(self._cohort_nominal, 0)

    def __contains__(self, tenant: object) -> bool:
        return tenant in self._quotas

    def quota(self, tenant: str) -> TenantQuota:
        """The tenant's quota; raises ``BrokerError`` for an unknown tenant (a name that is not
        text names none: a list was a ``TypeError`` out of ``Broker.usage`` until review R60)."""
        try:
            return self._quotas[tenant]
        except (KeyError, TypeError):
            raise BrokerError(f"unknown tenant {quoted(tenant)}") from None

    def used(self, tenant: str) -> int:
        """GPUs charged to the tenant; raises ``BrokerError`` for an unknown tenant."""
        self.quota(tenant)
        return self._used[tenant]

    def borrowed(self, tenant: str) -> int:
        """GPUs the tenant uses above its nominal quota (negative: unused nominal quota)."""
        return self._used[tenant] - self._quotas[tenant].nominal

    def ceiling(self, tenant: str) -> int:
        """The most GPUs the tenant could ever hold at once."""
        quota = self.quota(tenant)
        if quota.cohort is None:
            return quota.nominal
        cohort = self._cohort_nominal[quota.cohort]
        return cohort if quota.borrowing_limit is None else min(cohort, quota.nominal + quota.borrowing_limit)

    def charge(self, tenant: str, gpus: int) -> None:
        """Add ``gpus`` (negative: refund) to the tenant's and its cohort's usage."""
        self._used[tenant] += gpus
        cohort = self._quotas[tenant].cohort
        if cohort is not None:
            self._cohort_used[cohort] += gpus

    def leave(self, tenant: str, gpus: int) -> None:
        """Add ``gpus`` (negative: they are gone) to the tenant's and its cohort's leaving GPUs:
        those of its notified leases, no longer used but still held."""
        self._leaving[tenant] += gpus
        cohort = self._quotas[tenant].cohort
        if cohort is not None:
            self._cohort_leaving[cohort] += gpus

    def fits(
        self,
        tenant: str,
        n: int,
        released: Mapping[str, int] | None = None,
        *,
        with_leaving: bool = False,
    ) -> bool:
        """Whether ``tenant`` may take ``n`` more GPUs, were the ``released`` usage gone;
        ``with_leaving``: counting the GPUs of notified leases, which are still held (a grant
        now), else not (whether a preemption would make room once they are gone)."""
        released = released or {}
        quota = self._quotas[tenant]
        used = self._used[tenant] - released.get(tenant, 0)
        cohort = quota.cohort
        if with_leaving:
            used += self._leaving[tenant]
        if cohort is None:
            return used + n <= quota.nominal
        if quota.borrowing_limit is not None and used + n - quota.nominal > quota.borrowing_limit:
            return False
        cohort_released = sum(g for t, g in released.items() if self._quotas[t].cohort == cohort)
        cohort_used = self._cohort_used[cohort] - cohort_released
        if with_leaving:
            cohort_used += self._cohort_leaving[cohort]
        return cohort_used + n <= self._cohort_nominal[cohort]

    def may_reclaim_from(self, tenant: str, n: int, other: str) -> bool:
        """Whether a request of ``n`` GPUs by ``tenant`` may reclaim leases of ``other``: it stays
        within its nominal quota, and ``other`` is borrowing in the same cohort."""
        quota, lender = self._quotas[tenant], self._quotas[other]
        return (
            other != tenant
            and quota.cohort is not None
            and lender.cohort == quota.cohort
            and self._used[tenant] + n <= quota.nominal
            and self.borrowed(other) > 0
        )
