"""The quota counter's windows (agentgate/store/quotas.py, ``QuotaCounter``): an amount beyond
any window is a refusal, not an overflow; a call that adds nothing to a quota's unit is not refused
by its overfull window; the previous window survives the next one's start (a lagging clock cannot
reopen it). Real SQLite stores."""

from __future__ import annotations

from pathlib import Path

from agentgate.policy import QuotaRef
from agentgate.store import SQLiteStore
from agentgate.store.quotas import QuotaCounter

WINDOW = 3600
T0 = 1_800_000_000.0  # a window start (a multiple of WINDOW), far from any real clock


def _quota(limit: int) -> QuotaRef:
    return QuotaRef("calls-per-hour", "principal:agent", WINDOW, limit, "calls")


def _count(counter: QuotaCounter, quota: QuotaRef, amount: int, now: float) -> QuotaRef | None:
    with counter.store.transaction() as tx:
        return counter.count(tx, [quota], {"calls": amount}, now)


def test_the_previous_window_survives_the_next_ones_start_so_a_lagging_clock_cannot_reopen_it(
    tmp_path: Path,
) -> None:
    # q05: starting a window drops only the windows before the previous one. A decider whose
    # clock lags (another process, another host) still counts into the previous window; were it
    # dropped, that window would start again from zero and let its quota be used twice over.
    counter = QuotaCounter(SQLiteStore(tmp_path / "q.db"))
    quota = _quota(2)
    assert _count(counter, quota, 2, T0 + 10) is None  # window k full
    assert _count(counter, quota, 1, T0 + WINDOW + 1) is None  # window k + 1 starts
    assert _count(counter, quota, 1, T0 + WINDOW - 1) == quota  # a lagging clock: k is still full
    assert counter.used(quota, T0 + 10) == 2
    # Two windows on, window k is gone (nothing reads it again); k + 1 is kept.
    assert _count(counter, quota, 1, T0 + 2 * WINDOW + 1) is None
    assert counter.used(quota, T0 + 10) == 0 and counter.used(quota, T0 + WINDOW + 1) == 1
    counter.store.close()


def test_a_call_that_does_not_use_a_quotas_unit_is_not_refused_by_its_overfull_window(
    tmp_path: Path,
) -> None:
    # q02: a quota whose unit the call does not use is not counted. A window already over its
    # limit (the policy lowered the limit mid-window) must not refuse a call that adds nothing.
    counter = QuotaCounter(SQLiteStore(tmp_path / "q.db"))
    assert _count(counter, _quota(10), 5, T0 + 10) is None
    lowered = _quota(3)  # the same quota (same name, subject, unit, window), a lower limit
    assert _count(counter, lowered, 0, T0 + 20) is None
    assert _count(counter, lowered, 1, T0 + 30) == lowered
    assert counter.used(lowered, T0 + 30) == 5
    counter.store.close()


def test_an_amount_beyond_any_window_is_refused_not_an_overflow(tmp_path: Path) -> None:
    # q01: an amount over the limit is refused before any SQL: the column and its parameters are
    # 64-bit, and an amount past that must be the quota's refusal, not a store error.
    counter = QuotaCounter(SQLiteStore(tmp_path / "q.db"))
    quota = _quota(10)
    assert _count(counter, quota, 2**63, T0 + 10) == quota
    assert _count(counter, quota, 11, T0 + 10) == quota
    assert counter.used(quota, T0 + 10) == 0
    assert _count(counter, quota, 10, T0 + 10) is None
    counter.store.close()
