"""Cross-process concurrency slots: leases in the store that expire when their holder dies."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentgate.errors import CircuitOpen, InputError
from agentgate.store import Store
from agentgate.store.leases import LeaseManager, SharedBreakers, SharedRateLimits
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    ToolCall,
    ToolLimits,
)

REPO = Path(__file__).resolve().parents[1]


def test_slots_are_shared_by_managers_and_come_back_on_release(store: Store) -> None:
    first, second = LeaseManager(store, ttl_s=30), LeaseManager(store, ttl_s=30)
    held = [first.try_acquire("tool:x", 3), second.try_acquire("tool:x", 3), first.try_acquire("tool:x", 3)]
    assert all(held) and sorted(lease.slot for lease in held if lease) == [0, 1, 2]
    assert second.try_acquire("tool:x", 3) is None
    assert second.try_acquire("tool:y", 3) is not None  # another key has its own slots
    lease = held[1]
    assert lease is not None
    second.release(lease)
    again = first.try_acquire("tool:x", 3)
    assert again is not None and again.slot == 1
    assert len(first.rows("tool:x")) == 3
    first.close()
    second.close()
    assert first.rows("tool:x") == []  # close gives every lease back


def test_expired_lease_is_taken_over(store: Store) -> None:
    now = [1000.0]
    dead = LeaseManager(store, ttl_s=5, holder="dead", clock=lambda: now[0])
    alive = LeaseManager(store, ttl_s=5, holder="alive", clock=lambda: now[0])
    assert dead.try_acquire("k", 1) is not None
    now[0] += 4.9
    assert alive.try_acquire("k", 1) is None
    now[0] += 0.2
    taken = alive.try_acquire("k", 1)
    assert taken is not None and alive.rows("k")[0].holder == "alive"
    with pytest.raises(InputError):
        alive.try_acquire("k", 0)
    dead._held.clear()  # the dead holder never comes back to release
    alive.close()
    dead.close()


def test_heartbeat_renews_held_leases(store: Store) -> None:
    manager = LeaseManager(store, ttl_s=0.6)
    lease = manager.try_acquire("k", 1)
    assert lease is not None
    time.sleep(1.0)  # longer than the ttl: only the heartbeat keeps it
    other = LeaseManager(store, ttl_s=0.6)
    assert other.try_acquire("k", 1) is None
    manager.close()
    assert other.try_acquire("k", 1) is not None
    other.close()


_WORKER = textwrap.dedent(
    """
    import asyncio, fcntl, os, sys, time
    from pathlib import Path
    from agentgate.store import open_store
    from agentgate.tasks import Scheduler, SchedulerConfig, ToolCall, ToolLimits

    url, shared = sys.argv[1], Path(sys.argv[2])
    counter = shared / "counter"

    def bump(delta):
        with open(counter, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            now, peak, done = map(int, f.read().split())
            now += delta
            peak = max(peak, now)
            done += delta < 0
            f.seek(0); f.truncate(); f.write(f"{now} {peak} {done}")

    async def tool(attempt):
        bump(+1)
        await asyncio.sleep(0.03)
        bump(-1)

    async def main():
        store = open_store(url)
        scheduler = Scheduler(SchedulerConfig(tools={"x": ToolLimits(concurrency=4)}, lease_ttl_s=5), store=store)
        (shared / f"ready-{os.getpid()}").write_text("")
        while not (shared / "go").exists():
            await asyncio.sleep(0.01)
        await asyncio.gather(*(scheduler.submit(ToolCall("x"), tool) for _ in range(16)))
        await scheduler.aclose()
        store.close()

    asyncio.run(main())
    """
)


@pytest.mark.postgres
@pytest.mark.slow
def test_cross_process_limit_holds_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    (tmp_path / "counter").write_text("0 0 0")
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = [
        subprocess.Popen([sys.executable, str(script), postgres_url, str(tmp_path)], env=env)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ready-*"))) < 2:
            assert time.monotonic() < deadline, "workers did not start"
            assert all(w.poll() is None for w in workers), "a worker died"
            time.sleep(0.02)
        (tmp_path / "go").write_text("")
        assert [w.wait(timeout=60) for w in workers] == [0, 0]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    now, peak, done = map(int, (tmp_path / "counter").read_text().split())
    assert done == 32 and now == 0
    assert 2 <= peak <= 4, peak  # each process alone may run 4: without leases the peak reaches 8


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agentgate.store import open_store
    from agentgate.store.leases import LeaseManager

    manager = LeaseManager(open_store(sys.argv[1]), ttl_s=float(sys.argv[3]))
    assert manager.try_acquire("tool:solo", 1) is not None
    Path(sys.argv[2]).write_text("held")
    time.sleep(600)
    """
)


@pytest.mark.slow
def test_sigkilled_holders_slot_comes_back_within_the_lease_time(store: Store, tmp_path: Path) -> None:
    ttl = 1.0
    script, flag = tmp_path / "holder.py", tmp_path / "held"
    script.write_text(_HOLDER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, str(script), store.url, str(flag), str(ttl)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert time.monotonic() < deadline and holder.poll() is None, "the holder did not start"
            time.sleep(0.02)
        me = LeaseManager(store, ttl_s=ttl)
        time.sleep(ttl * 1.3)  # past one ttl: the holder's heartbeat keeps the slot
        assert me.try_acquire("tool:solo", 1) is None
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        killed = time.monotonic()
        while (lease := me.try_acquire("tool:solo", 1)) is None:
            time.sleep(0.02)
        came_back = time.monotonic() - killed
    finally:
        if holder.poll() is None:
            holder.kill()
    assert lease.slot == 0
    assert came_back <= ttl + 0.25, came_back
    me.close()


def test_shared_rate_bucket_burst_then_rate(store: Store) -> None:
    now = [5000.0]
    first = SharedRateLimits(store, clock=lambda: now[0])
    second = SharedRateLimits(store, clock=lambda: now[0])
    assert [first.try_take("tool:api", 10.0, 2), second.try_take("tool:api", 10.0, 2)] == [0.0, 0.0]
    assert second.try_take("tool:api", 10.0, 2) == pytest.approx(0.1)  # the burst is shared
    now[0] += 0.05
    assert first.try_take("tool:api", 10.0, 2) == pytest.approx(0.05)
    now[0] += 0.05
    assert first.try_take("tool:api", 10.0, 2) == 0.0
    assert second.try_take("tool:other", 10.0, 2) == 0.0  # another key, another bucket
    behind = SharedRateLimits(store, clock=lambda: now[0] - 60)  # a host whose clock is a minute behind
    assert behind.try_take("tool:api", 10.0, 2) > 0  # no refill for time running backwards
    with pytest.raises(InputError):
        first.try_take("tool:api", 0, 2)


async def test_rate_limit_holds_across_schedulers_sharing_a_store(store: Store) -> None:
    config = SchedulerConfig(tools={"api": ToolLimits(rate=RateLimit(per_second=20, burst=2))})
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)
    starts: list[float] = []

    async def tool(attempt: Attempt) -> None:
        starts.append(time.monotonic())

    t0 = time.monotonic()
    await asyncio.gather(*(s.submit(ToolCall("api"), tool) for s in (first, second) for _ in range(6)))
    # 12 calls, 2 from the shared burst, 10 more at 20/s: at least 0.5 s. Each scheduler alone
    # would have finished its 6 in 0.2 s.
    assert len(starts) == 12
    assert max(starts) - t0 >= 0.5 - 0.02
    await first.aclose()
    await second.aclose()


async def shared_state(store: Store, key: str, state: str) -> None:
    """Wait (up to 10 s) until a scheduler's background publish of ``key`` has reached the store."""
    deadline = time.monotonic() + 10
    while (found := SharedBreakers(store).read(key)) is None or found.state != state:
        assert time.monotonic() < deadline, f"{key} never became {state}"
        await asyncio.sleep(0.01)


async def test_breaker_state_is_shared_through_the_store(store: Store) -> None:
    # The second scheduler alone would stay open for a minute: it can only close by adopting.
    first = Scheduler(
        SchedulerConfig(breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=0.8)), store=store
    )
    second = Scheduler(
        SchedulerConfig(breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=60)), store=store
    )
    healthy = False

    async def backend(attempt: Attempt) -> str:
        if not healthy:
            raise ConnectionRefusedError("down")
        return "ok"

    assert await second.submit(ToolCall("search"), lambda a: asyncio.sleep(0, "warm")) == "warm"
    for _ in range(2):
        with pytest.raises(ConnectionRefusedError):
            await first.submit(ToolCall("search"), backend)
    assert first.breaker("tool:search").state is BreakerState.OPEN
    await shared_state(store, "tool:search", "open")
    await asyncio.sleep(0.3)  # the second scheduler reads the shared state at most every 0.25 s
    with pytest.raises(CircuitOpen):  # opened by the first scheduler's failures, not its own
        await second.submit(ToolCall("search"), backend)
    [shared] = SharedBreakers(store).all()
    assert (shared.key, shared.state) == ("tool:search", "open")
    await asyncio.sleep(0.55)  # past the reset timeout: the first scheduler lets a probe through
    healthy = True
    assert await first.submit(ToolCall("search"), backend) == "ok"  # the probe closes it
    assert second.breaker("tool:search").state is BreakerState.OPEN
    await shared_state(store, "tool:search", "closed")
    await asyncio.sleep(0.3)
    assert await second.submit(ToolCall("search"), backend) == "ok"  # closed by the first's probe
    assert second.breaker("tool:search").state is BreakerState.CLOSED
    assert SharedBreakers(store).all()[0].state == "closed"
    await first.aclose()
    await second.aclose()
