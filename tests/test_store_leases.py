"""Cross-process limits in the store (agentgate/store/leases.py): a lease given back is no longer
held nor renewed, and every live slot counts against a lowered limit; a shared token bucket
neither refills nor drains when hosts' clocks disagree, and never saves more than its burst.
(The slots' expiry when their holder dies is in tests/test_tasks_leases.py.)
"""

from __future__ import annotations

import pytest

from agentgate.store import Store
from agentgate.store.leases import BUCKET_AHEAD_S, LeaseManager, SharedRateLimits


def test_live_slots_above_a_lowered_limit_count_against_it(store: Store) -> None:
    """A process whose policy still allows 3 holds slots 1 and 2; a process whose policy was
    lowered to 2 sees 2 live slots and takes none, though slot 0 is free: the limit counts every
    live slot, not just those below it. Kills: ``len(taken) > limit`` in ``try_acquire`` (a
    third call ran under a limit of 2)."""
    old, new = LeaseManager(store, ttl_s=30), LeaseManager(store, ttl_s=30)
    held = [old.try_acquire("tool:pay", 3) for _ in range(3)]
    assert all(held) and sorted(lease.slot for lease in held if lease) == [0, 1, 2]
    first = next(lease for lease in held if lease is not None and lease.slot == 0)
    old.release(first)
    assert new.try_acquire("tool:pay", 2) is None
    assert len(new.rows("tool:pay")) == 2
    old.close()
    new.close()


def test_a_released_lease_is_no_longer_held_nor_renewed(store: Store) -> None:
    """A lease given back leaves the holder's set: ``held`` drops to 0 and ``renew`` renews
    nothing (the heartbeat never pushes its expiry again, whatever the store did with the
    release). Kills: ``release`` not discarding the lease from the held set."""
    manager = LeaseManager(store, ttl_s=30)
    lease = manager.try_acquire("tool:x", 1)
    assert lease is not None and manager.held() == 1
    manager.release(lease)
    assert manager.held() == 0
    assert manager.renew() == 0
    manager.close()


def test_a_shared_bucket_behind_a_hosts_clock_asks_one_tokens_wait_not_the_lag(store: Store) -> None:
    """A host whose clock is 30 s behind the host that took the last token is told to wait one
    token's time (0.1 s at 10/s), never minus-30-s of refill: time running backwards neither
    refills nor drains the bucket. Kills: ``max(0.0, now - since)`` dropped in
    ``SharedRateLimits.try_take`` (the lag drained 300 tokens: a 30 s wait for every process)."""
    now = [10_000.0]
    ahead = SharedRateLimits(store, clock=lambda: now[0])
    behind = SharedRateLimits(store, clock=lambda: now[0] - 30.0)
    assert ahead.try_take("tool:api", 10.0, 1) == 0.0
    assert behind.try_take("tool:api", 10.0, 1) == pytest.approx(0.1)
    now[0] += 0.1  # the behind host's clock moved on 0.1 s as well: the bucket is still empty
    assert behind.try_take("tool:api", 10.0, 1) == pytest.approx(0.1)


def test_a_shared_bucket_dated_far_ahead_refills_once_the_cap_has_passed(store: Store) -> None:
    """A host whose clock was an hour ahead emptied the bucket (its row is dated an hour on).
    The bucket is believed only ``BUCKET_AHEAD_S`` ahead, and re-dated so, even while empty: a
    token comes back ``BUCKET_AHEAD_S`` + one token's time later, not an hour later. Kills: the
    cap dropped (``since = updated_at``), and the re-dating of an empty bucket dropped."""
    now = [20_000.0]
    stepped = SharedRateLimits(store, clock=lambda: now[0] + 3600.0)
    honest = SharedRateLimits(store, clock=lambda: now[0])
    assert stepped.try_take("tool:api", 10.0, 1) == 0.0
    assert honest.try_take("tool:api", 10.0, 1) == pytest.approx(0.1)  # empty, as written
    now[0] += BUCKET_AHEAD_S + 0.2
    assert honest.try_take("tool:api", 10.0, 1) == 0.0


def test_a_shared_bucket_idle_for_long_holds_no_more_than_its_burst(store: Store) -> None:
    """After 100 s idle at 10/s, a shared bucket of burst 2 gives 2 tokens, then asks a token's
    wait: idle time never saves more than the burst. Kills: ``min(float(burst), ...)`` dropped in
    ``SharedRateLimits.try_take`` (1,000 tokens saved up: a burst of 1,000 calls)."""
    now = [30_000.0]
    rates = SharedRateLimits(store, clock=lambda: now[0])
    assert rates.try_take("tool:api", 10.0, 2) == 0.0
    now[0] += 100.0
    assert [rates.try_take("tool:api", 10.0, 2) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]
