"""Policy quota windows (agentgate/store/quotas.py) under clocks that disagree: a decider whose
clock runs several windows ahead (another host, a clock stepped forward and back) starts its own
window without dropping the window that deciders on the right time are still counting into, so
their window is never started again from zero past its limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.policy import QuotaRef
from agentgate.store import SQLiteStore, Store
from agentgate.store.quotas import KEEP_WINDOWS_S, QuotaCounter

WINDOW = 60
T0 = 1_800_000_000.0  # a window start (a multiple of WINDOW), far from any real clock


def _count(counter: QuotaCounter, quota: QuotaRef, now: float) -> QuotaRef | None:
    with counter.store.transaction() as tx:
        return counter.count(tx, [quota], {"calls": 1}, now)


@pytest.mark.parametrize("ahead_windows", [2, 10, 59])
def test_a_clock_windows_ahead_does_not_reopen_the_window_others_count_into(
    store: Store, ahead_windows: int
) -> None:
    """Review R60: a decider 2+ windows ahead dropped the current window; it restarted from zero."""
    counter = QuotaCounter(store)
    quota = QuotaRef("calls-per-minute", "tenant:team", WINDOW, 2, "calls")
    assert _count(counter, quota, T0 + 10) is None
    assert _count(counter, quota, T0 + 11) is None  # the window is full
    ahead = T0 + 10 + ahead_windows * WINDOW  # a host whose clock is ahead starts its own window
    assert _count(counter, quota, ahead) is None
    assert _count(counter, quota, T0 + 12) == quota  # the window on the right time is still full
    assert counter.used(quota, T0 + 12) == 2 and counter.used(quota, ahead) == 1


def test_windows_older_than_the_kept_span_are_dropped(tmp_path: Path) -> None:
    """What only grows is bounded: a window that began more than KEEP_WINDOWS_S (or one window)
    before the one being started is dropped when that one starts."""
    counter = QuotaCounter(SQLiteStore(tmp_path / "q.db"))
    quota = QuotaRef("calls-per-minute", "tenant:team", WINDOW, 2, "calls")
    assert _count(counter, quota, T0 + 10) is None
    assert _count(counter, quota, T0 + KEEP_WINDOWS_S + 10) is None  # T0's window is still kept
    assert counter.used(quota, T0 + 10) == 1
    assert _count(counter, quota, T0 + KEEP_WINDOWS_S + WINDOW + 10) is None  # now it is not
    assert counter.used(quota, T0 + 10) == 0
    rows = counter.store.query("SELECT count(*) FROM quota_usage")
    assert int(rows[0][0]) == 2
    counter.store.close()
