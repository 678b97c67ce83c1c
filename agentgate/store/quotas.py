"""Policy quotas: usage per fixed time window, counted in the transaction that records a decision.

A quota (docs/policy-reference.md, ``quotas:``) limits what one tenant, principal or role may use
of some resources in each window of ``window_s`` seconds, in one unit (calls, tokens or
micro-dollars). Windows are fixed and aligned to the Unix epoch (window ``k`` covers
``[k * window_s, (k + 1) * window_s)``), so every process sharing the store counts into the same
row: ``quota_usage(quota, window_start, used)``. The ``quota`` column is the quota's whole
identity, ``NAME SUBJECT UNIT WINDOW_S`` (``quota_key``): a policy that changes a quota's unit,
subject or window starts a fresh count rather than reading calls as tokens or one tenant's usage
as another's (a changed limit keeps the count, and applies to it). A call is counted when it is allowed, by the
amount the decision reserves (a model call's estimate, not what it turns out to use): a quota is
a ceiling, so it counts the most the call may use.

Counting is one conditional ``UPDATE`` per quota, like the budget ledger's reservations: it
changes the row only if the amount still fits, so concurrent deciders (threads or processes)
can never push a window past its limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from agentgate.store._base import Dialect, Store, Transaction

if TYPE_CHECKING:  # annotations only: reading a store never loads the policy layer
    from agentgate.policy import QuotaRef

QUOTA_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS quota_usage (
    quota TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    used INTEGER NOT NULL CHECK (used >= 0),
    PRIMARY KEY (quota, window_start)
);
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS quota_usage (
    quota TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    used BIGINT NOT NULL CHECK (used >= 0),
    PRIMARY KEY (quota, window_start)
);
""",
}


def quota_key(quota: QuotaRef) -> str:
    """The row key of ``quota``'s usage: name, subject, unit and window, space-separated (no part
    holds a space: names are policy names, subjects ``KIND:NAME``)."""
    return f"{quota.name} {quota.subject} {quota.unit} {quota.window_s}"


KEEP_WINDOWS_S = 3600
"""How long, at least, a window's count is kept after the window being started begins: a
decider whose clock is behind the one that starts a window by less than this (another process,
another host, a clock stepped back) still finds its own window's count, never a fresh zero."""

_COUNT = "UPDATE quota_usage SET used = used + ? WHERE quota = ? AND window_start = ? AND used <= ? - ?"


def window_start(window_s: int, now: float) -> int:
    """The start (Unix seconds) of the window of ``window_s`` seconds that holds ``now``."""
    return int(now // window_s) * window_s


class QuotaCounter:
    """Usage of the policy's quotas, shared by every process that uses the same store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("quotas", QUOTA_DDL)

    def count(
        self, tx: Transaction, quotas: Sequence[QuotaRef], amounts: Mapping[str, int], now: float
    ) -> QuotaRef | None:
        """Count ``amounts`` (per unit) against each quota's current window, in ``tx``.

        Returns the first quota whose window cannot hold its amount, or ``None`` when every one
        could. Quotas counted before the refusing one are already updated in ``tx``: the caller
        rolls back (to a savepoint) on a refusal. A quota whose unit the call does not use is
        not counted.
        """
        for quota in quotas:
            amount = amounts.get(quota.unit, 0)
            if amount <= 0:
                continue
            if amount > quota.limit:  # no window can hold it (nor a 64-bit column, at worst)
                return quota
            start, key = window_start(quota.window_s, now), quota_key(quota)
            params = (amount, key, start, quota.limit, amount)
            tx.execute(_COUNT, params)
            if tx.rowcount == 1:
                continue
            # First use of this window: start its row (and drop the quota's windows that began
            # KEEP_WINDOWS_S, or one window if longer, before it), then the same conditional
            # update decides. The windows since stay: a decider that read the clock before the
            # boundary (another process, a host whose clock lags, a clock stepped back) still
            # counts into its own, and would otherwise find it gone and start it again from
            # zero, past its limit. Until review R60 only the previous window stayed: a host
            # whose clock ran two windows ahead dropped the window the others were counting
            # into, each time it started one, and they started it again from zero. A window that a
            # release before ``quota_key`` counted under the bare name starts from that count
            # (unknown unit: the larger reading, so an upgrade never reopens a full window).
            tx.execute(
                "DELETE FROM quota_usage WHERE quota IN (?, ?) AND window_start < ?",
                (key, quota.name, start - max(quota.window_s, KEEP_WINDOWS_S)),
            )
            tx.execute(
                "INSERT INTO quota_usage (quota, window_start, used) SELECT ?, ?, coalesce("
                "(SELECT used FROM quota_usage WHERE quota = ? AND window_start = ?), 0) WHERE true "
                "ON CONFLICT (quota, window_start) DO NOTHING",
                (key, start, quota.name, start),
            )
            tx.execute(_COUNT, params)
            if tx.rowcount != 1:
                return quota
        return None

    def used(self, quota: QuotaRef, now: float, tx: Transaction | None = None) -> int:
        """What ``quota``'s window holding ``now`` has counted so far (0 for a window not started)."""
        sql = "SELECT used FROM quota_usage WHERE quota = ? AND window_start = ?"
        params = (quota_key(quota), window_start(quota.window_s, now))
        rows = tx.execute(sql, params) if tx is not None else self.store.query(sql, params)
        return int(rows[0][0]) if rows else 0
