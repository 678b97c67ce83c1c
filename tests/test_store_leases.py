"""Cross-process limits in the store (agentgate/store/leases.py): concurrency slots held by leases
that expire when their holder dies (a lease given back is no longer held nor renewed, and every
live slot counts against a lowered limit); shared rate buckets, which neither refill nor drain when
hosts' clocks disagree and never save more than their burst; shared breaker states; and keys
stored by digest when too long or holding a NUL."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentgate.errors import CircuitOpen, InputError, StoreError
from agentgate.store import SQLiteStore, Store
from agentgate.store.leases import BUCKET_AHEAD_S, LeaseManager, SharedBreakers, SharedRateLimits, stored_key
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
    manager = LeaseManager(store, ttl_s=1.0)  # the shortest (MIN_TTL_S)
    lease = manager.try_acquire("k", 1)
    assert lease is not None
    time.sleep(1.4)  # longer than the ttl: only the heartbeat keeps it
    other = LeaseManager(store, ttl_s=1.0)
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


# --- an interleaving store ------------------------------------------------------------------------
# The PostgreSQL tests below interleave a second connection's committed work between two statements
# of a real transaction (``_Hooked``): the moment READ COMMITTED lets another process in, which
# SQLite's one writer never allows.


class _HookedTx:
    """A real transaction that runs ``meanwhile`` once, right after its first statement holding
    ``trigger`` (or raises ``fail`` instead of running that statement)."""

    def __init__(self, tx: Any, owner: _Hooked) -> None:
        self.tx, self.owner = tx, owner

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        owner = self.owner
        if owner.fail is not None and owner.trigger in sql and owner.fired < owner.times:
            owner.fired += 1
            raise owner.fail
        rows = self.tx.execute(sql, params)
        if owner.meanwhile is not None and owner.trigger in sql and owner.fired < owner.times:
            owner.fired += 1
            owner.meanwhile()
        return rows

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.tx.executemany(sql, rows)

    @property
    def rowcount(self) -> int:
        return int(self.tx.rowcount)


class _Hooked:
    """A real store whose transactions run ``meanwhile`` after the first statement holding
    ``trigger`` (or raise ``fail`` in its place), ``times`` times in all."""

    def __init__(
        self,
        store: Store,
        trigger: str,
        *,
        meanwhile: Callable[[], None] | None = None,
        fail: Exception | None = None,
        times: int = 1,
    ) -> None:
        self._store, self.trigger, self.meanwhile, self.fail = store, trigger, meanwhile, fail
        self.times, self.fired = times, 0
        self.transactions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[_HookedTx]:
        self.transactions += 1
        with self._store.transaction(immediate=immediate) as tx:
            yield _HookedTx(tx, self)


def _pg(url: str) -> Store:
    from agentgate.store._postgres import PostgresStore

    return PostgresStore(url)


# --- slots, rate buckets and breakers at their boundaries and under races ---------------------------


def test_releasing_a_lease_taken_over_by_its_own_holder_keeps_the_new_one(sqlite_store: SQLiteStore) -> None:
    """Kills L4 (``_RELEASE`` without ``lease_id = ?``): a holder whose lease expired and that then
    took the same slot again under a new lease gave the old one back late, and the mutant deleted
    the new lease's row, so a second process got the slot while the first still ran: two calls
    under a limit of one. Rule: a release removes only the lease it names."""
    now = [1000.0]
    mine = LeaseManager(sqlite_store, ttl_s=30, holder="me", clock=lambda: now[0])
    other = LeaseManager(sqlite_store, ttl_s=30, holder="other", clock=lambda: now[0])
    try:
        old = mine.try_acquire("tool:x", 1)
        assert old is not None
        now[0] += 31  # the old lease expired (no heartbeat ran: its period is 10 s)
        new = mine.try_acquire("tool:x", 1)
        assert new is not None and new.slot == old.slot and new.lease_id != old.lease_id
        mine.release(old)  # late: the slot is the new lease's now
        assert [row.holder for row in mine.rows("tool:x")] == ["me"]
        assert other.try_acquire("tool:x", 1) is None
    finally:
        mine.close()
        other.close()


def test_a_slot_is_free_at_the_instant_its_lease_expires(sqlite_store: SQLiteStore) -> None:
    """Kills L1 (``_TAKEN``: ``expires_at >= ?``) and L2 (``_CLAIM``: ``expires_at < ?``): at the
    very instant a lease's ``expires_at`` is reached the mutants still counted the slot as held.
    Rule: a lease is live while ``expires_at > now`` (as ``rows`` reports), and the count, the
    take-over and the listing agree on that one boundary."""
    now = [1000.0]
    dead = LeaseManager(sqlite_store, ttl_s=5, holder="dead", clock=lambda: now[0])
    alive = LeaseManager(sqlite_store, ttl_s=5, holder="alive", clock=lambda: now[0])
    try:
        assert dead.try_acquire("k", 1) is not None
        now[0] = 1005.0  # exactly expires_at
        assert alive.rows("k") == []
        taken = alive.try_acquire("k", 1)
        assert taken is not None and [r.holder for r in alive.rows("k")] == ["alive"]
    finally:
        dead._held.clear()  # the dead holder never comes back
        alive.close()
        dead.close()


def test_renew_pushes_every_held_lease_past_one_batch(sqlite_store: SQLiteStore) -> None:
    """Kills L7 (``_RENEW`` batches of ``_RENEW_BATCH - 1``: one lease of each batch skipped) and
    L8 (``renewed = tx.rowcount``: only the last batch counted). A process holding more than one
    batch of leases (501) kept them all only if every one was renewed: the skipped one expired
    while its call still ran and another process took the slot. Rule: ``renew`` renews every
    lease held and returns how many."""
    now = [1000.0]
    manager = LeaseManager(sqlite_store, ttl_s=30, holder="many", clock=lambda: now[0])
    other = LeaseManager(sqlite_store, ttl_s=30, holder="other", clock=lambda: now[0])
    try:
        for i in range(501):
            assert manager.try_acquire(f"tool:{i:03d}", 1) is not None
        now[0] += 20
        assert manager.renew() == 501
        now[0] += 20  # past the first expiry, within the renewed one
        assert all(other.try_acquire(f"tool:{i:03d}", 1) is None for i in range(501))
    finally:
        manager.close()
        other.close()


def test_the_heartbeat_goes_on_renewing_after_the_store_failed_once(sqlite_store: SQLiteStore) -> None:
    """Kills L11 (the heartbeat thread returning on ``StoreError`` instead of trying again): one
    blip of the store stopped the renewals for good, so every lease the process held expired
    while its calls still ran and other processes took the slots. Rule: a failed renewal is
    retried at the next beat."""
    hooked = _Hooked(sqlite_store, "UPDATE agentgate_leases SET expires_at", fail=StoreError("store down"))
    manager = LeaseManager(hooked, ttl_s=1.0)  # type: ignore[arg-type]
    renewed = threading.Event()
    try:
        assert manager.try_acquire("k", 1) is not None
        first = manager.rows("k")[0].expires_at
        for _ in range(200):  # until a renewal after the failed one lands (the mutant: never)
            if hooked.fired and manager.rows("k") and manager.rows("k")[0].expires_at > first:
                renewed.set()
                break
            threading.Event().wait(0.05)
        assert hooked.fired == 1
        assert renewed.is_set()
    finally:
        manager.close()


def test_a_closed_manager_takes_no_slot(sqlite_store: SQLiteStore) -> None:
    """Kills L13 (``try_acquire`` without the closed check): a closed manager's heartbeat has
    stopped, so a slot it took was never renewed and expired while its call ran. Rule: a closed
    manager raises ``StoreError`` and takes nothing."""
    manager = LeaseManager(sqlite_store, ttl_s=30)
    manager.close()
    with pytest.raises(StoreError):
        manager.try_acquire("k", 1)
    assert manager.rows("k") == []


def test_a_key_with_a_nul_character_is_stored_by_digest_on_postgres(postgres_url: str) -> None:
    """Kills L18 (``stored_key`` without the NUL check on its slow path): a key holding a NUL was
    passed through as it is, which PostgreSQL's text refuses, so the tool's calls failed closed
    on PostgreSQL only. Rule: such a key takes its slot by ``sha256:`` digest on both stores."""
    key = "tool:a\x00b"
    assert stored_key(key).startswith("sha256:")
    store = _pg(postgres_url)
    try:
        manager = LeaseManager(store, ttl_s=30)
        lease = manager.try_acquire(key, 1)
        assert lease is not None and manager.try_acquire(key, 1) is None
        manager.close()
    finally:
        store.close()


def test_a_key_of_exactly_the_byte_limit_is_kept_as_it_is() -> None:
    """Kills L19 (``len(data) < _KEY_BYTES``): a key of exactly 1024 bytes was stored by digest,
    moving its slots (and breaker) to another row than the version before used for it during a
    rolling upgrade. Rule: only a key longer than 1024 UTF-8 bytes is stored by digest."""
    exact = "é" * 512  # 1024 bytes, 512 characters: past the fast path
    assert stored_key(exact) == exact
    assert stored_key(exact + "x").startswith("sha256:")


@pytest.mark.postgres
def test_a_slot_taken_by_another_process_meanwhile_is_not_held_twice(postgres_url: str) -> None:
    """Kills L14 (``try_acquire`` taking the slot whatever the claim's row count): on PostgreSQL
    another process can take the slot between the count of live slots and the claim; the claim
    then changes no row, and the mutant still handed out a lease: two calls under a limit of
    one. Rule: a slot is held only when the claim wrote its row."""
    one, two = _pg(postgres_url), _pg(postgres_url)
    try:
        rival = LeaseManager(two, ttl_s=30, holder="rival")
        hooked = _Hooked(
            one, "SELECT slot FROM agentgate_leases", meanwhile=lambda: rival.try_acquire("k", 1)
        )
        manager = LeaseManager(hooked, ttl_s=30, holder="late")  # type: ignore[arg-type]
        assert manager.try_acquire("k", 1) is None
        assert hooked.fired == 1
        assert [row.holder for row in rival.rows("k")] == ["rival"]
        assert manager.held() == 0
        manager.close()
        rival.close()
    finally:
        one.close()
        two.close()


@pytest.mark.postgres
def test_a_token_taken_by_another_process_meanwhile_is_not_given_twice(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills L24 (``try_take`` returning a token whatever the swap's row count) and L27 (the swap
    comparing ``updated_at`` only): another process took a token between the read and the
    compare-and-swap at the same clock reading, and the mutants gave this caller a token too
    while the bucket lost only one: a burst of 3 let 4 calls through. Rule: a token is taken only
    by a swap of the row as it was read; a lost race is retried. Since review R88 the read locks
    the row on PostgreSQL, so no taker comes in between (tests/test_store_r88_bucket_takers_queue.py);
    read unlocked here, as before (an agentgate of before R88 still does), the swap is the guard."""
    import agentgate.store.leases as leases

    monkeypatch.setitem(leases._BUCKET_READ, "postgresql", leases._BUCKET_READ["sqlite"])
    one, two = _pg(postgres_url), _pg(postgres_url)
    try:
        rival = SharedRateLimits(two, clock=lambda: 1000.0)
        assert rival.try_take("api", 0.001, 3) == 0.0  # the bucket exists: 2 tokens left
        hooked = _Hooked(one, "SELECT tokens, updated_at", meanwhile=lambda: rival.try_take("api", 0.001, 3))
        limits = SharedRateLimits(hooked, clock=lambda: 1000.0)  # type: ignore[arg-type]
        assert limits.try_take("api", 0.001, 3) == 0.0  # retried after the lost race: the last token
        assert hooked.fired == 1
        assert rival.try_take("api", 0.001, 3) > 0  # 3 taken, none left
    finally:
        one.close()
        two.close()


def test_every_publish_of_a_shared_breaker_raises_its_version(store: Store) -> None:
    """Kills L28 (``publish`` keeping the version on an update): a process adopts a shared breaker
    state only when its version is newer than the one it saw, so with the version stuck at 1 a
    breaker opened again by one process after it closed was never adopted by the others, which
    went on calling the failing backend. Rule: each publish written makes the version grow by one.
    (Since review R67 processes order rows by transition time, the version is for operators; a
    closing at the very time of the opening is no longer written: an opening outranks it.)"""
    from agentgate.store.leases import SharedBreakers

    breakers, other = SharedBreakers(store), SharedBreakers(store)
    breakers.publish("b", "open", 1000.0)
    breakers.publish("b", "closed", 1010.0)
    other.publish("b", "open", 1030.0)
    state = breakers.read("b")
    assert state is not None and (state.state, state.opened_at, state.version) == ("open", 1030.0, 3)


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


@pytest.mark.parametrize(
    "ttl_s",
    [math.nan, math.inf, -1.0, 0, True, "10", None, 11 * 365 * 86_400, pytest.param(10**400, id="10**400")],
)
def test_a_lease_manager_refuses_a_ttl_that_is_not_a_finite_positive_number(
    sqlite_store: SQLiteStore, ttl_s: object
) -> None:
    """Review R57: ``LeaseManager(store, ttl_s=nan)`` and ``ttl_s=inf`` were taken (``ttl_s <= 0``
    is false for NaN): leases that never expire, and a heartbeat that died of ``OverflowError``.
    Rule: as ``SchedulerConfig.lease_ttl_s`` (whose bounds it shares since review R87), a ttl
    that is not a number of seconds from 1 to ten years is an ``InputError`` naming ``ttl_s``."""
    with pytest.raises(InputError, match=r"^lease ttl_s must be a finite number of at least 1 and at most"):
        LeaseManager(sqlite_store, ttl_s=ttl_s)  # type: ignore[arg-type]


def test_the_lease_and_bucket_bounds_are_the_scheduler_configurations() -> None:
    """The store's bounds on a lease's ttl and a bucket's burst are those ``SchedulerConfig`` and
    ``RateLimit`` check, so that every configuration they accept the store accepts too."""
    from agentgate.store.leases import MAX_BURST, MAX_TTL_S
    from agentgate.tasks._config import MAX_BURST as CONFIG_MAX_BURST
    from agentgate.tasks._config import MAX_LEASE_TTL_S

    assert (MAX_TTL_S, MAX_BURST) == (MAX_LEASE_TTL_S, CONFIG_MAX_BURST)


@pytest.mark.parametrize("limit", [1.5, 0, -1, True, math.nan, "2", None])
def test_a_lease_limit_that_is_not_a_positive_whole_number_is_refused_and_takes_no_slot(
    store: Store, limit: object
) -> None:
    """Review R57: ``try_acquire(key, 1.5)`` (or NaN) ended in a ``TypeError`` traceback from
    ``range``, and ``True`` was taken as a limit of 1. Rule: ``InputError`` naming the limit,
    and no slot is taken."""
    manager = LeaseManager(store, ttl_s=30)
    with pytest.raises(InputError, match=r"^the lease limit must be a whole number from 1 to "):
        manager.try_acquire("tool:x", limit)  # type: ignore[arg-type]
    assert manager.rows("tool:x") == [] and manager.held() == 0
    manager.close()


@pytest.mark.parametrize(
    ("per_second", "burst", "named"),
    [
        (math.nan, 1, "per_second"),
        (math.inf, 1, "per_second"),
        (0, 1, "per_second"),
        (True, 1, "per_second"),
        (1.0, 1.5, "burst"),
        (1.0, True, "burst"),
        (1.0, math.nan, "burst"),
        (1.0, 2**53 + 1, "burst"),
        (1.0, 0, "burst"),
    ],
)
def test_a_shared_rate_that_is_not_a_valid_rate_limit_is_refused_and_leaves_no_bucket(
    store: Store, per_second: object, burst: object, named: str
) -> None:
    """Review R57: ``SharedRateLimits.try_take`` took a NaN or infinite ``per_second`` (a NaN
    level, never refused again) and a fractional or NaN ``burst``, which ``RateLimit`` refuses.
    Rule: ``InputError`` naming the parameter, and no bucket row is written."""
    rates = SharedRateLimits(store, clock=lambda: 1000.0)
    with pytest.raises(InputError, match=rf"^the rate's {named} must be "):
        rates.try_take("tool:x", per_second, burst)  # type: ignore[arg-type]
    assert store.query("SELECT count(*) FROM agentgate_rate_buckets")[0][0] == 0
