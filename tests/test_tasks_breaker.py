"""Circuit breakers: closed -> open -> half-open -> closed (or open again), visible in state and metrics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentgate.errors import CircuitOpen, DeadlineExceeded
from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_breaker_state_machine() -> None:
    clock = Clock()
    changes: list[tuple[BreakerState, BreakerState]] = []
    breaker = CircuitBreaker(
        "tool:x",
        BreakerPolicy(failure_threshold=3, reset_timeout_s=10, half_open_max_calls=1),
        clock=clock,
        on_change=lambda key, old, new: changes.append((old, new)),
    )
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure("transient")
    breaker.record_success()  # a success resets the count
    for _ in range(2):
        breaker.record_failure("timeout")
    breaker.record_failure("error")  # not a health signal: does not count
    assert breaker.state is BreakerState.CLOSED
    breaker.record_failure("connection")
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    assert breaker.snapshot().retry_after_s == 10
    clock.now += 10
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow() and not breaker.allow()  # exactly one probe
    breaker.record_failure("transient")
    assert breaker.state is BreakerState.OPEN  # the probe failed: open again
    clock.now += 10
    assert breaker.allow()
    breaker.release()  # the probe did not run: it may be taken again
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    closed, opened, half = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
    assert changes == [(closed, opened), (opened, half), (half, opened), (opened, half), (half, closed)]
    assert breaker.snapshot().opened_count == 2


async def test_scheduler_breaker_opens_refuses_then_recovers() -> None:
    policy = BreakerPolicy(failure_threshold=2, reset_timeout_s=0.05)
    scheduler = Scheduler(SchedulerConfig(breaker=policy))
    healthy = False
    runs = 0

    async def backend(attempt: Attempt) -> str:
        nonlocal runs
        runs += 1
        if not healthy:
            raise ConnectionRefusedError("down")
        return "ok"

    for _ in range(2):
        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("search"), backend)
    with pytest.raises(CircuitOpen, match="tool:search"):
        await scheduler.submit(ToolCall("search"), backend)
    assert runs == 2  # refused without running
    [snap] = scheduler.breakers()
    assert snap.key == "tool:search" and snap.state is BreakerState.OPEN
    assert scheduler.registry.get_sample_value("agentgate_tasks_breaker_state", {"key": "tool:search"}) == 2
    await asyncio.sleep(0.06)
    assert scheduler.breaker("tool:search").state is BreakerState.HALF_OPEN
    healthy = True
    assert await scheduler.submit(ToolCall("search"), backend) == "ok"
    assert scheduler.breaker("tool:search").state is BreakerState.CLOSED
    assert scheduler.registry.get_sample_value("agentgate_tasks_breaker_state", {"key": "tool:search"}) == 0
    assert scheduler.metrics.count("breaker_opened", "tool:search") == 1
    assert scheduler.metrics.count("breaker_closed", "tool:search") == 1
    await scheduler.aclose()


async def test_breaker_key_can_name_a_backend_shared_by_tools() -> None:
    scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=60)))

    async def down(attempt: Attempt) -> None:
        raise TimeoutError

    with pytest.raises(TimeoutError):
        await scheduler.submit(ToolCall("a", breaker_key="backend:gpu-1"), down)
    with pytest.raises(CircuitOpen):
        await scheduler.submit(ToolCall("b", breaker_key="backend:gpu-1"), down)
    assert scheduler.breaker("tool:a").state is BreakerState.CLOSED
    await scheduler.aclose()


async def test_cancelled_half_open_probe_is_given_back() -> None:
    scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.01)))

    async def fail(attempt: Attempt) -> None:
        raise TimeoutError

    async def hang(attempt: Attempt) -> None:
        await asyncio.sleep(10)

    async def ok(attempt: Attempt) -> str:
        return "ok"

    with pytest.raises(TimeoutError):
        await scheduler.submit(ToolCall("x"), fail)
    await asyncio.sleep(0.02)
    probe = asyncio.create_task(scheduler.submit(ToolCall("x"), hang))
    await asyncio.sleep(0.005)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert await scheduler.submit(ToolCall("x"), ok) == "ok"  # the probe slot was not lost
    await scheduler.aclose()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
async def test_a_half_open_probe_interrupted_by_a_base_exception_is_given_back(
    interrupt: type[BaseException],
) -> None:
    """Kills: the async attempt loop gave a probe back only for ``CancelledError``; a tool that
    raised KeyboardInterrupt or SystemExit while holding the only half-open probe kept it, and
    the breaker stayed half open with every probe taken, refusing every later call with
    ``CircuitOpen`` (retry after 0) for good. Rule: an interrupted call says nothing about the
    tool, as a cancelled one: its probe goes back and the next call probes the tool."""
    scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.01)))

    async def fail(attempt: Attempt) -> None:
        raise TimeoutError

    async def interrupted(attempt: Attempt) -> None:
        raise interrupt

    async def ok(attempt: Attempt) -> str:
        return "ok"

    with pytest.raises(TimeoutError):
        await scheduler.submit(ToolCall("x"), fail)
    await asyncio.sleep(0.02)
    assert scheduler.breaker("tool:x").state is BreakerState.HALF_OPEN
    with pytest.raises(interrupt):
        await scheduler.submit(ToolCall("x"), interrupted)
    assert scheduler.in_flight == 0
    assert await scheduler.submit(ToolCall("x"), ok) == "ok"  # the probe was given back
    assert scheduler.breaker("tool:x").state is BreakerState.CLOSED
    await scheduler.aclose()


def _broken_pause_predicate(error: BaseException) -> bool:
    return error.args[0] == "pause"  # IndexError for an exception without arguments


async def test_a_pause_predicate_that_raises_says_not_a_pause() -> None:
    """Kills: ``Scheduler._failed`` called ``ToolCall.pauses`` unguarded. A predicate that raised
    (here an IndexError) replaced the tool's error, so the failure was not told to the breaker,
    and a half-open probe the attempt held was kept: the breaker stayed half open refusing every
    later call. Rule: a raising predicate says "not a pause" (as a raising classifier says
    ``error``); the caller gets the tool's error, the breaker hears of it, sync and async alike."""
    config = SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.01))
    scheduler = Scheduler(config)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError

    async def ok(attempt: Attempt) -> str:
        return "ok"

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("x"), down)
    await asyncio.sleep(0.02)
    assert scheduler.breaker("tool:x").state is BreakerState.HALF_OPEN
    with pytest.raises(ConnectionRefusedError):  # the probe fails: the breaker opens again
        await scheduler.submit(ToolCall("x", pauses=_broken_pause_predicate), down)
    assert scheduler.breaker("tool:x").state is BreakerState.OPEN
    await asyncio.sleep(0.02)
    assert await scheduler.submit(ToolCall("x"), ok) == "ok"
    await scheduler.aclose()

    def sync_down(attempt: Attempt) -> None:
        raise ConnectionRefusedError

    with SyncScheduler(config) as sync:
        with pytest.raises(ConnectionRefusedError):
            sync.submit(ToolCall("x"), sync_down)
        await asyncio.sleep(0.02)
        with pytest.raises(ConnectionRefusedError):
            sync.submit(ToolCall("x", pauses=_broken_pause_predicate), sync_down)
        assert sync.scheduler.breaker("tool:x").state is BreakerState.OPEN
        await asyncio.sleep(0.02)
        assert sync.submit(ToolCall("x"), lambda attempt: "ok") == "ok"


# --- a half-open probe whose attempt says nothing about the tool ------------------------------


async def test_a_half_open_probe_cut_by_the_callers_deadline_is_given_back() -> None:
    """Kills: the probe of an attempt cut by the caller's own deadline not released
    (``Scheduler._failed``'s ``elif probe: breaker.release()``): the breaker stayed half-open
    with its only probe slot taken, refusing every later call with ``CircuitOpen`` for good.
    Rule: a cut attempt says nothing about the tool; its probe goes back, so the next call
    probes the tool and, succeeding, closes the breaker."""
    config = SchedulerConfig(
        tools={"search": ToolLimits(timeout_s=5.0)},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05),
    )
    scheduler = Scheduler(config)
    calls: list[str] = []

    async def down(attempt: Attempt) -> str:
        raise ConnectionRefusedError("upstream down")

    async def slow(attempt: Attempt) -> str:
        calls.append("slow")
        await asyncio.sleep(0.2)
        return "ok"

    async def fast(attempt: Attempt) -> str:
        calls.append("fast")
        return "ok"

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("search"), down)
    assert scheduler.breaker("tool:search").state is BreakerState.OPEN
    with pytest.raises(CircuitOpen):
        await scheduler.submit(ToolCall("search"), fast)
    await asyncio.sleep(0.06)
    assert scheduler.breaker("tool:search").state is BreakerState.HALF_OPEN
    with pytest.raises(DeadlineExceeded, match="did not finish"):
        await scheduler.submit(ToolCall("search", tenant="hasty", deadline=time.time() + 0.02), slow)
    assert scheduler.breaker("tool:search").state is BreakerState.HALF_OPEN
    assert await scheduler.submit(ToolCall("search", tenant="other"), fast) == "ok"
    assert calls == ["slow", "fast"]
    assert scheduler.breaker("tool:search").state is BreakerState.CLOSED
    await scheduler.aclose()


async def test_a_half_open_probe_given_up_before_its_tool_started_is_given_back(tmp_path: Path) -> None:
    """Kills: the probe of an attempt that gave up before its tool started not released (the
    ``if probing: breaker.release()`` of ``Scheduler.submit``'s attempt): a probe admitted, then
    refused its cross-process rate token before the deadline, kept the breaker's only probe
    slot, and the breaker refused every later call for good.
    Rule: an attempt that never ran says nothing about the tool; its half-open probe goes back."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(
        tools={"api": ToolLimits(rate=RateLimit(per_second=0.2, burst=1))},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05),
    )
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)  # two processes
    ran: list[str] = []

    async def down(attempt: Attempt) -> None:
        ran.append(attempt.call.tool)
        raise ConnectionRefusedError("upstream down")

    async def up(attempt: Attempt) -> None:
        ran.append(attempt.call.tool)

    await first.submit(ToolCall("api"), up)  # takes the shared token: the next is 5 s away
    with pytest.raises(ConnectionRefusedError):  # opens second's breaker of the backend
        await second.submit(ToolCall("other", breaker_key="backend:x"), down)
    breaker = second.breaker("backend:x")
    await asyncio.sleep(0.06)
    assert breaker.state is BreakerState.HALF_OPEN
    with pytest.raises(DeadlineExceeded, match="rate token"):
        await second.submit(ToolCall("api", breaker_key="backend:x", deadline=time.time() + 0.3), up)
    assert ran == ["api", "other"]
    assert breaker.admit() is True  # the probe slot is free again
    breaker.release()
    await first.aclose()
    await second.aclose()
    store.close()


async def test_breaker_transitions_reach_the_store_in_the_order_they_were_made(tmp_path: Path) -> None:
    """Kills: each breaker transition was published by a job of its own on the scheduler's store
    pool, so with a short reset timeout a breaker's ``closed`` could be written while its
    ``open`` still waited for the store, and ``open`` was then written last: the other
    processes saw the tool's breaker open (refusing its calls) while it was closed here, until
    the next transition. Rule: a key's transitions are written one at a time, in order; the
    store ends with the breaker's state."""
    import threading

    from agentgate.store.leases import SharedBreakers

    class HeldFirstWrite(SharedBreakers):
        """The store, with the first write held (a slow commit) until the test lets it go."""

        def __init__(self, store: SQLiteStore) -> None:
            super().__init__(store)
            self.release = threading.Event()
            self.written: list[str] = []
            self.calls = 0
            self.running = 0
            self.most_running = 0
            self.lock = threading.Lock()

        def publish(self, key: str, state: str, opened_at: float) -> None:
            with self.lock:
                self.calls += 1
                first = self.calls == 1
                self.running += 1
                self.most_running = max(self.most_running, self.running)
            try:
                if first:
                    self.release.wait(10)
                super().publish(key, state, opened_at)
                self.written.append(state)
            finally:
                with self.lock:
                    self.running -= 1

    store = SQLiteStore(tmp_path / "breakers.db")
    config = SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.001))
    scheduler = Scheduler(config, store=store)
    held = HeldFirstWrite(store)
    scheduler._shared_breakers = held

    async def down(_attempt: Attempt) -> str:
        raise ConnectionError("down")

    async def up(_attempt: Attempt) -> str:
        return "up"

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("pay"), down)  # opens: its write is held
        breaker = scheduler.breaker("tool:pay")
        while True:  # past the reset timeout a probe succeeds and closes it
            try:
                assert await scheduler.submit(ToolCall("pay"), up) == "up"
                break
            except CircuitOpen:
                await asyncio.sleep(0.005)
        assert breaker.state is BreakerState.CLOSED
        # Before the fix the close was written by a job of its own meanwhile; wait for it (at most 2 s).
        for _ in range(200):
            if held.written:
                break
            await asyncio.sleep(0.01)
        held.release.set()
    finally:
        held.release.set()
        await scheduler.aclose()  # waits for the publishing
    found = SharedBreakers(store).read("tool:pay")
    assert found is not None and found.state == "closed"
    assert held.written[-1] == "closed" and held.most_running == 1
    store.close()


@pytest.mark.parametrize(
    ("state", "opened_at", "version"),
    [("'open'", "'abc'", "99"), ("'open'", "1.0", "'x'"), ("'opne'", "1.0", "99")],
)
async def test_a_corrupt_shared_breaker_row_leaves_the_local_breaker_alone(
    tmp_path: Path, state: str, opened_at: str, version: str
) -> None:
    """Review R54: a breaker row that no process wrote (opened_at 'abc', version 'x', a state
    'opne') raised ValueError out of submit, or was taken as closed and closed the open local
    breaker; the row is corrupt, so the call goes on under its local breaker, as when the store
    cannot be read."""
    from agentgate.store.leases import SharedBreakers

    store = SQLiteStore(tmp_path / "s.db")
    scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1)), store=store)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    async def up(attempt: Attempt) -> str:
        return "ran"

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("api"), down)
    async with asyncio.timeout(5):  # the opening is written by a store worker: until it has been
        while scheduler._background or SharedBreakers(store).read("tool:api") is None:
            await asyncio.sleep(0.01)
    with store.transaction() as tx:
        tx.execute(
            f"UPDATE agentgate_breakers SET state = {state}, opened_at = {opened_at}, version = {version}"
        )
    scheduler._breaker_seen.clear()  # read the row again now, not 0.25 s later
    with pytest.raises(CircuitOpen):
        await scheduler.submit(ToolCall("api"), up)
    assert scheduler.breaker("tool:api").state is BreakerState.OPEN
    await scheduler.aclose()
    store.close()


# --- half-open periods: a probe of an ended period touches nothing of the current one ---------


def test_a_probe_of_an_ended_half_open_period_touches_nothing_of_the_current_one() -> None:
    """Review R54: a probe admitted in an earlier half-open period, released or reported after
    another probe reopened the breaker, freed or decided a probe of the new period.
    Rule: ``admit_in_period`` names the period; a probe of an ended period gives no probe back,
    and its outcome counts as a call admitted before the breaker opened (the probes decide)."""
    clock = Clock()
    breaker = CircuitBreaker(
        "tool:x",
        BreakerPolicy(failure_threshold=1, reset_timeout_s=10, half_open_max_calls=2),
        clock=clock,
    )
    assert breaker.admit_in_period() == 0  # CLOSED: no probe
    breaker.record_failure("transient", period=0)
    clock.now += 10
    early, failing = breaker.admit_in_period(), breaker.admit_in_period()
    assert early == failing == 1
    breaker.record_failure("transient", period=failing)  # period 1 ends: OPEN again
    clock.now += 10
    first, second = breaker.admit_in_period(), breaker.admit_in_period()
    assert first == second == 2 and breaker.admit_in_period() is None
    breaker.release(early)  # the early probe ends without a word: no probe of period 2 is freed
    assert breaker.admit_in_period() is None
    breaker.record_failure("error", period=early)  # nor by a failure that says nothing
    assert breaker.admit_in_period() is None
    breaker.record_success(period=early)  # its success leaves period 2's probes to decide
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.record_failure("transient", period=early)  # and so does its failure
    assert breaker.state is BreakerState.HALF_OPEN and breaker.snapshot().opened_count == 2
    breaker.release(first)  # a current probe's release still frees its slot
    assert breaker.admit_in_period() == 2
    breaker.record_success(period=second)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.admit() is False  # admit and the calls without a period work as before


async def test_a_probe_outliving_its_half_open_period_frees_no_probe_of_the_next() -> None:
    """Review R54: a scheduler's probe still running when another process reopened the breaker
    gave back, at its end, the probe slot of the next half-open period, so a second probe ran
    beside that period's one (more than ``half_open_max_calls`` at once).
    Rule: the probe of an ended period frees nothing of the current one."""
    config = SchedulerConfig(
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=30, half_open_max_calls=1)
    )
    scheduler = Scheduler(config)
    breaker = scheduler.breaker("tool:t")
    breaker.adopt_open(60)  # opened by another process a minute ago: half open now
    started = {"early": asyncio.Event(), "late": asyncio.Event()}
    finish = {"early": asyncio.Event(), "late": asyncio.Event()}

    async def probe(attempt: Attempt) -> str:
        name = attempt.call.tenant
        started[name].set()
        await finish[name].wait()
        return name

    early = asyncio.create_task(scheduler.submit(ToolCall("t", tenant="early"), probe))
    await started["early"].wait()
    breaker.adopt_open(60)  # another process's probe failed: a new half-open period
    late = asyncio.create_task(scheduler.submit(ToolCall("t", tenant="late"), probe))
    await started["late"].wait()
    assert breaker.admit() is None  # period 2's one probe runs
    early.cancel()
    with pytest.raises(asyncio.CancelledError):
        await early
    assert breaker.admit() is None, "the early probe's end freed the probe slot of the next period"
    finish["late"].set()
    assert await late == "late"
    assert breaker.state is BreakerState.CLOSED
    await scheduler.aclose()


# --- a stale shared row never undoes this process's own transition ----------------------------


async def test_a_stale_shared_row_never_closes_the_breaker_this_process_just_opened(tmp_path: Path) -> None:
    """Review R54: one stale read closed a newly opened local breaker: a "closed" row read
    before this process's own "open" was written (read while the breaker opened, or while its
    "open" still waited for the store, after a first read had failed and left version 0 seen)
    was newer than the version seen and was adopted, and the next call ran against a tool that
    had just failed. Rule: a row that may be older than a transition of this process is not
    adopted; the breaker stays open."""
    import threading

    from agentgate.errors import StoreError
    from agentgate.store.leases import SharedBreakers, SharedBreakerState

    class Held(SharedBreakers):
        """The store, with a read held after reading (a slow query), a write held before
        writing (a slow commit), or a read that fails, as the test says."""

        def __init__(self, store: SQLiteStore) -> None:
            super().__init__(store)
            self.hold_read = self.hold_write = self.fail_read = False
            self.reading, self.read_go = threading.Event(), threading.Event()
            self.wrote, self.write_go = threading.Event(), threading.Event()

        def read(self, key: str) -> SharedBreakerState | None:
            if self.fail_read:
                self.fail_read = False
                raise StoreError("the store is away")
            found = super().read(key)
            if self.hold_read:
                self.hold_read = False
                self.reading.set()
                self.read_go.wait(10)
            return found

        def publish(self, key: str, state: str, opened_at: float) -> None:
            if self.hold_write:
                self.write_go.wait(10)
            super().publish(key, state, opened_at)
            self.wrote.set()

    store = SQLiteStore(tmp_path / "s.db")
    other = SharedBreakers(store)  # another process: it opened and closed both breakers
    for key in ("tool:a", "tool:b"):
        other.publish(key, "open", time.time() - 100)
        other.publish(key, "closed", 0.0)
    scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1)), store=store)
    held = Held(store)
    scheduler._shared_breakers = held

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    async def up(attempt: Attempt) -> str:
        return "ran"

    started, failing = asyncio.Event(), asyncio.Event()

    async def down_when_told(attempt: Attempt) -> None:
        started.set()
        await failing.wait()
        raise ConnectionRefusedError("upstream down")

    try:
        # 1. The "closed" row is read, then a call admitted before the read began fails: this
        # process opens the breaker and writes "open". (A call made during the read waits for it,
        # since review R95: the transition comes from a call already running.)
        running = asyncio.create_task(scheduler.submit(ToolCall("a"), down_when_told))
        await started.wait()
        scheduler._breaker_seen.clear()  # read the row again now, not 0.25 s later
        held.hold_read = True
        reading = asyncio.create_task(scheduler.submit(ToolCall("a"), up))
        assert await asyncio.to_thread(held.reading.wait, 10)
        failing.set()
        with pytest.raises(ConnectionRefusedError):
            await running
        assert await asyncio.to_thread(held.wrote.wait, 10)
        held.read_go.set()
        with pytest.raises(CircuitOpen):
            await reading
        assert scheduler.breaker("tool:a").state is BreakerState.OPEN
        # 2. The first read fails (version 0 seen); this process opens, its "open" not written yet.
        held.fail_read = held.hold_write = True
        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("b"), down)
        scheduler._breaker_seen.clear()  # read the row again now, not 0.25 s later
        with pytest.raises(CircuitOpen):
            await scheduler.submit(ToolCall("b"), up)
        assert scheduler.breaker("tool:b").state is BreakerState.OPEN
    finally:
        held.read_go.set()
        held.write_go.set()
        await scheduler.aclose()
    store.close()


async def test_an_opening_the_store_could_not_take_is_not_undone_by_its_older_row(tmp_path: Path) -> None:
    """Review R55: a breaker transition whose write failed counted as settled, so when the store
    came back its older "closed" row was adopted and closed the breaker this process had just
    opened. Rule: the local state holds until a write succeeds; the next check writes it again."""
    import os

    from agentgate.store.leases import SharedBreakers

    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    other = SharedBreakers(store)  # another process: it opened and closed the breaker
    other.publish("tool:c", "open", time.time() - 100)
    other.publish("tool:c", "closed", 0.0)
    scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1)), store=store)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    async def up(attempt: Attempt) -> str:
        return "ran"

    async def published() -> None:
        async with asyncio.timeout(5):
            while scheduler._background:
                await asyncio.sleep(0.01)

    try:
        os.rename(path, tmp_path / "away.db")  # every commit and read now fails (check_in_place)
        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("c"), down)  # opens; the "open" cannot be written
        await published()
        assert scheduler.metrics.events.get(("breaker_not_shared", "tool:c")) == 1
        os.rename(tmp_path / "away.db", path)  # the store is back, its row still "closed"
        scheduler._breaker_seen.clear()  # read the row again now, not 0.25 s later
        with pytest.raises(CircuitOpen):
            await scheduler.submit(ToolCall("c"), up)
        assert scheduler.breaker("tool:c").state is BreakerState.OPEN
        await published()  # that check wrote the opening again
        found = SharedBreakers(store).read("tool:c")
        assert found is not None and found.state == "open"
    finally:
        await scheduler.aclose()
        store.close()


async def test_a_store_worker_stopped_by_a_base_exception_releases_its_key(tmp_path: Path) -> None:
    """Review R55: a BaseException (not an Exception) out of a store worker's write left the key
    marked as being written, so no later transition of it was published. Rule: the key is
    released and the transition kept as unwritten, to be written again."""
    from agentgate.store.leases import SharedBreakers

    class Stopped(BaseException):
        pass

    class StopsOnce(SharedBreakers):
        stopped = False

        def publish(self, key: str, state: str, opened_at: float) -> None:
            if not self.stopped:
                self.stopped = True
                raise Stopped
            super().publish(key, state, opened_at)

    store = SQLiteStore(tmp_path / "s.db")
    scheduler = Scheduler(SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1)), store=store)
    scheduler._shared_breakers = StopsOnce(store)
    shared = scheduler.shared
    try:
        opened = ("open", time.time(), 1)
        assert shared.queue_publication("tool:k", *opened)
        with pytest.raises(Stopped):
            scheduler._publish_in_order("tool:k")
        assert shared.to_write_again("tool:k") == opened
        assert shared.queue_publication("tool:k", *opened)  # released: a worker may start again
        scheduler._publish_in_order("tool:k")
        assert shared.to_write_again("tool:k") is None
        found = SharedBreakers(store).read("tool:k")
        assert found is not None and found.state == "open"
    finally:
        await scheduler.aclose()
        store.close()
