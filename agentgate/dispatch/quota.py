"""Per-tenant token buckets, the quota half of the router's admission rule.

A bucket holds up to ``burst`` tokens and refills at ``rate`` tokens per second. Dispatching a
request debits its cost (prompt + maximum output tokens) whether or not the bucket holds enough:
the router is work-conserving and lets a tenant borrow idle capacity. Only when the pool cannot
meet a request's SLO, or every backend holds its ``max_concurrency``, does the balance matter:
tenants in debt are shed first (they never wait in line for a slot ahead of a tenant within its
quota), with a
``Retry-After`` equal to the time their bucket needs to pay for the request (to fill up, for a
request costing more than the burst; the router's is at most ``MAX_RETRY_AFTER_S``). The balance
never falls below ``-burst``, so a tenant's debt, and its wait, stay bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate._numbers import check_positive_finite


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A tenant's share of model tokens.

    Raises ``InputError`` on construction unless both numbers are positive and finite (a zero,
    negative or NaN quota used to pass here and fail, untyped, at the tenant's first call).
    """

    rate_tokens_per_s: float
    """Refill rate."""
    burst_tokens: float
    """Bucket size."""

    def __post_init__(self) -> None:
        for name in ("rate_tokens_per_s", "burst_tokens"):
            check_positive_finite(getattr(self, name), f"token quota: {name}")


class TokenBucket:
    """One tenant's balance."""

    def __init__(self, quota: TenantQuota, now: float) -> None:
        self.quota = quota
        self.tokens = quota.burst_tokens
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(
                self.quota.burst_tokens, self.tokens + (now - self.updated) * self.quota.rate_tokens_per_s
            )
            self.updated = now

    def can_pay(self, cost: float, now: float, *, paid: float = 0.0) -> bool:
        """True if the balance covers ``cost`` now; a cost over the burst, which no balance can
        cover, is covered by a full bucket (else a tenant could never be served such a call
        under overload, however long it waited: ``seconds_until`` counts the same way).

        ``paid``: the tokens this call's own dispatch took already (``debit``'s return, for a call
        failed over, ``RouteRequest.failover``): True if the balance without that debit would
        cover it, so that a call is never found over its quota by its own charge, while a tenant
        in debt from its other calls still is. It is what ``debit`` took, not ``cost``: where the
        floor at ``-burst`` clipped the debit, adding the whole cost back (until review R86)
        found a call costing twice the burst or more within quota whatever its tenant owed."""
        self._refill(now)
        return self.tokens + paid >= min(cost, self.quota.burst_tokens)

    def debit(self, cost: float, now: float) -> float:
        """Take ``cost`` tokens; the balance may go negative, never below ``-burst``. Returns the
        tokens taken: ``cost``, or less where that floor clipped it."""
        self._refill(now)
        if self.tokens - cost >= -self.quota.burst_tokens:
            self.tokens -= cost
            return cost
        taken = self.tokens + self.quota.burst_tokens
        self.tokens = -self.quota.burst_tokens
        return taken

    def seconds_until(self, cost: float, now: float) -> float:
        """Seconds until the balance covers ``cost`` (0 if it does)."""
        self._refill(now)
        missing = min(cost, self.quota.burst_tokens) - self.tokens
        return max(0.0, missing / self.quota.rate_tokens_per_s)
