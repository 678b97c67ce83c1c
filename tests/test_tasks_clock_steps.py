"""Wall-clock steps (NTP, VM resume, an operator fixing the date) and
hosts whose clocks differ must not shut a limit, expire leases early, or keep them forever."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    Granted,
    SteadyWallClock,
    TenantQuota,
    synthetic_topology,
)
from agentgate.errors import StoreError
from agentgate.store import SQLiteStore, Store
from agentgate.store.leases import BUCKET_AHEAD_S, SharedRateLimits


def test_shared_rate_bucket_refills_again_after_a_clock_stepped_forward_and_back(store: Store) -> None:
    now = [5000.0]
    host = SharedRateLimits(store, clock=lambda: now[0])
    stepped = SharedRateLimits(store, clock=lambda: now[0] + 86400)  # a day ahead, stepped back later
    assert stepped.try_take("tool:api", 10.0, 2) == 0.0
    assert host.try_take("tool:api", 10.0, 2) == 0.0
    assert host.try_take("tool:api", 10.0, 2) > 0  # the burst is spent
    now[0] += BUCKET_AHEAD_S + 1
    assert host.try_take("tool:api", 10.0, 2) == 0.0  # not a day later: at most BUCKET_AHEAD_S
    assert host.try_take("tool:api", 10.0, 2) == 0.0
    assert host.try_take("tool:api", 10.0, 2) > 0  # and refilled for the time passed, not more


def test_shared_rate_bucket_gives_no_refill_to_a_clock_slightly_behind(store: Store) -> None:
    now = [5000.0]
    host = SharedRateLimits(store, clock=lambda: now[0])
    behind = SharedRateLimits(store, clock=lambda: now[0] - BUCKET_AHEAD_S / 2)
    assert [host.try_take("tool:api", 1.0, 1), behind.try_take("tool:api", 1.0, 1)] == [0.0, 1.0]
    now[0] += 0.5
    assert host.try_take("tool:api", 1.0, 1) == 0.5  # the lagging host's reads moved nothing


def test_broker_serves_equal_priorities_in_arrival_order_when_the_clock_steps_back() -> None:
    wall = [10_000.0]
    broker = Broker(
        synthetic_topology(1, 8), [TenantQuota("a", 8), TenantQuota("b", 8)], clock=lambda: wall[0]
    )
    broker.submit(GangRequest("running", "a", 8))
    broker.submit(GangRequest("first", "a", 8))
    wall[0] -= 60  # the wall clock is stepped back a minute
    broker.submit(GangRequest("second", "b", 8))
    assert [q.request.id for q in broker.queue()] == ["first", "second"]
    granted = [e.lease.id for e in broker.release("running") if isinstance(e, Granted)]
    assert granted == ["first"]


def test_restored_broker_keeps_the_saved_queue_order() -> None:
    wall = [10_000.0]
    quotas = [TenantQuota("a", 8), TenantQuota("b", 8)]
    broker = Broker(synthetic_topology(1, 8), quotas, clock=lambda: wall[0])
    broker.submit(GangRequest("running", "a", 8))
    broker.submit(GangRequest("first", "a", 8))
    wall[0] -= 60
    broker.submit(GangRequest("second", "b", 8))
    restored = Broker(synthetic_topology(1, 8), quotas, clock=lambda: wall[0])
    restored.restore(broker.snapshot())
    assert [q.request.id for q in restored.queue()] == ["first", "second"]
    wall[0] -= 60
    restored.submit(GangRequest("third", "a", 8))  # after the restored ones, whatever its time
    assert [q.request.id for q in restored.queue()] == ["first", "second", "third"]


def test_a_default_broker_runs_on_a_steady_wall_clock() -> None:
    # A wall-clock step cannot be made in a test: the default must be the clock that ignores one
    # (time.time, the default before, ended every lease on a step forward by more than ttl_s).
    broker = Broker(synthetic_topology(1, 8), [TenantQuota("a", 8)], ttl_s=30.0)
    assert isinstance(broker.clock, SteadyWallClock)
    lease = broker.submit(GangRequest("running", "a", 8))[0]
    assert isinstance(lease, Granted) and abs(lease.lease.granted_at - time.time()) < 60  # dates


def test_the_steady_wall_clock_moves_with_the_monotonic_clock_not_the_wall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = SteadyWallClock()
    first = clock()
    monkeypatch.setattr(time, "time", lambda: first + 86_400.0)  # the wall clock stepped a day
    monotonic = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: monotonic + 5.0)
    assert clock() >= first + 5.0
    assert clock() < first + 6.0


@pytest.mark.parametrize(
    ("tokens", "updated_at"), [("'abc'", "5000.0"), ("1.0", "'later'"), ("1.0", "X'00'")]
)
def test_a_corrupt_shared_rate_bucket_row_is_a_store_error(
    tmp_path: Path, tokens: str, updated_at: str
) -> None:
    """Review R54: a rate bucket row whose level or time is not a number (text kept by SQLite in
    a REAL column, written by hand or by another program) raised ValueError or TypeError out of
    ``try_take`` and so out of the scheduler's ``submit``; it is a ``StoreError`` naming the key
    and the field, which the scheduler answers by refusing the call (fail closed)."""
    store = SQLiteStore(tmp_path / "s.db")
    rates = SharedRateLimits(store, clock=lambda: 5000.0)
    with store.transaction() as tx:
        tx.execute(f"INSERT INTO agentgate_rate_buckets VALUES ('tool:api', {tokens}, {updated_at})")
    with pytest.raises(StoreError, match="rate bucket 'tool:api'"):
        rates.try_take("tool:api", 1.0, 1)
    store.close()
