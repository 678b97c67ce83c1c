"""The sync facade: same limits from threads, tools run in the caller's thread, no leaked threads."""

from __future__ import annotations

import concurrent.futures
import random
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentgate.errors import CircuitOpen, DeadlineExceeded, SchedulingError
from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    RateLimit,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    TenantShare,
    TokenBucket,
    ToolCall,
    ToolLimits,
)


class Transient(Exception):
    error_class = "transient"


def test_sync_concurrency_limit_never_exceeded_under_1000_submissions() -> None:
    before = set(threading.enumerate())
    config = SchedulerConfig(max_concurrency=6, tools={"db": ToolLimits(concurrency=3)})
    lock = threading.Lock()
    now = {"*": 0, "db": 0}
    peak = {"*": 0, "db": 0}
    callers: set[int] = set()

    def tool(attempt: Attempt) -> int:
        keys = ["*", "db"] if attempt.call.tool == "db" else ["*"]
        with lock:
            callers.add(threading.get_ident())
            for key in keys:
                now[key] += 1
                peak[key] = max(peak[key], now[key])
        time.sleep(0.0002)
        with lock:
            for key in keys:
                now[key] -= 1
        return int(attempt.call.arguments["i"])

    with SyncScheduler(config) as scheduler, ThreadPoolExecutor(max_workers=32) as pool:
        calls = [ToolCall("db" if i % 2 else "cache", arguments={"i": i}) for i in range(1000)]
        results = list(pool.map(lambda call: scheduler.submit(call, tool), calls))
    assert sorted(results) == list(range(1000))
    assert peak["*"] <= 6 and peak["db"] <= 3 and peak["*"] >= 2
    assert set(threading.enumerate()) <= before  # the loop thread was joined by close()
    assert threading.main_thread().ident not in callers  # tools ran in the callers' threads


def test_sync_tool_runs_in_the_callers_thread_with_retries() -> None:
    policy = RetryPolicy(attempts=3, backoff_initial_s=0.001, retry_on=("transient",))
    seen: list[tuple[int, int]] = []

    def tool(attempt: Attempt) -> str:
        seen.append((attempt.number, threading.get_ident()))
        if attempt.number < 3:
            raise Transient("again")
        return "done"

    with SyncScheduler(SchedulerConfig(tools={"t": ToolLimits(retry=policy)})) as scheduler:
        assert scheduler.submit(ToolCall("t"), tool) == "done"
        with pytest.raises(ValueError, match="bad"):
            scheduler.submit(ToolCall("u"), lambda a: (_ for _ in ()).throw(ValueError("bad")))
    assert [n for n, _ in seen] == [1, 2, 3]
    assert {ident for _, ident in seen} == {threading.get_ident()}


def test_sync_overrunning_tool_keeps_its_slot_until_it_returns() -> None:
    config = SchedulerConfig(tools={"slow": ToolLimits(concurrency=1, timeout_s=0.01)})
    lock = threading.Lock()
    running = 0
    peak = 0

    def slow(attempt: Attempt) -> str:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)  # five times its timeout: cannot be interrupted
        with lock:
            running -= 1
        return "late"

    with SyncScheduler(config) as scheduler, ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda _: scheduler.submit(ToolCall("slow"), slow), range(3)))
    assert results == ["late"] * 3 and peak == 1


def test_closed_sync_scheduler_refuses_and_leaves_no_thread() -> None:
    before = {t.ident for t in threading.enumerate()}
    scheduler = SyncScheduler()
    assert scheduler.submit(ToolCall("x"), lambda a: 1) == 1
    scheduler.close()
    scheduler.close()  # idempotent
    with pytest.raises(SchedulingError, match="closed"):
        scheduler.submit(ToolCall("x"), lambda a: 1)
    assert {t.ident for t in threading.enumerate()} == before


def _wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.001)


def test_a_newcomer_does_not_overtake_queued_calls() -> None:
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})
    release = threading.Event()
    order: list[str] = []

    def tool(attempt: Attempt) -> str:
        name = str(attempt.call.arguments["name"])
        order.append(name)
        if name == "A":
            release.wait(5)
        return name

    with SyncScheduler(config) as scheduler, ThreadPoolExecutor(max_workers=8) as pool:
        core = scheduler.scheduler
        first = pool.submit(scheduler.submit, ToolCall("t", arguments={"name": "A"}), tool)
        _wait_until(lambda: order == ["A"])
        queued = []
        for i in range(5):  # one at a time, so their arrival order is known
            queued.append(pool.submit(scheduler.submit, ToolCall("t", arguments={"name": f"B{i}"}), tool))
            _wait_until(lambda i=i: core.queued == i + 1)  # type: ignore[misc]
        release.set()
        # The slot A gives back goes to B0 at once (under the lock): the newcomer finds no room.
        assert scheduler.submit(ToolCall("t", arguments={"name": "N"}), tool) == "N"
        assert first.result() == "A" and [f.result() for f in queued] == [f"B{i}" for i in range(5)]
    assert order == ["A", "B0", "B1", "B2", "B3", "B4", "N"]
    assert core.metrics.count("queued", "t") == 6  # the newcomer queued too


def test_every_limit_holds_under_1000_sync_submissions_fast_and_queued() -> None:
    config = SchedulerConfig(
        max_concurrency=7,
        principal_concurrency=2,
        tenants={"a": TenantShare(concurrency=4), "b": TenantShare(concurrency=3)},
        tools={"db": ToolLimits(concurrency=3), "web": ToolLimits(concurrency=5)},
    )
    lock = threading.Lock()
    now: dict[str, int] = {}
    peak: dict[str, int] = {}

    def tool(attempt: Attempt) -> int:
        call = attempt.call
        keys = ["*", call.tool, "tenant:" + call.tenant, f"agent:{call.tenant}/{call.principal}"]
        with lock:
            for key in keys:
                now[key] = now.get(key, 0) + 1
                peak[key] = max(peak.get(key, 0), now[key])
        time.sleep(0.0001 * (int(call.arguments["i"]) % 3))
        with lock:
            for key in keys:
                now[key] -= 1
        return int(call.arguments["i"])

    calls = [
        ToolCall(
            ("db", "web")[i % 2],
            arguments={"i": i},
            tenant=("a", "b")[i % 3 % 2],
            principal=f"p{i % 5}",
            run_id="run" if i % 4 == 0 else None,  # a quarter with idempotency keys
            call_id=str(i),
        )
        for i in range(1000)
    ]
    with SyncScheduler(config) as scheduler, ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda call: scheduler.submit(call, tool), calls))
        core = scheduler.scheduler
        assert core.queued == 0 and core.in_flight == 0
        queued = core.metrics.count("queued", "db") + core.metrics.count("queued", "web")
        started = core.metrics.count("started", "db") + core.metrics.count("started", "web")
    assert sorted(results) == list(range(1000)) and started == 1000
    assert 0 < queued < 1000  # both paths were taken: started at once, and after waiting
    assert peak["*"] <= 7 and peak["db"] <= 3 and peak["web"] <= 5
    assert peak["tenant:a"] <= 4 and peak["tenant:b"] <= 3
    assert max(v for k, v in peak.items() if k.startswith("agent:")) <= 2
    assert peak["*"] >= 2


def test_a_queued_sync_call_gives_up_at_its_deadline_and_frees_nothing_it_did_not_hold() -> None:
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})
    release = threading.Event()
    with SyncScheduler(config) as scheduler, ThreadPoolExecutor(max_workers=2) as pool:
        holder = pool.submit(scheduler.submit, ToolCall("t"), lambda a: release.wait(5))
        _wait_until(lambda: scheduler.scheduler.in_flight == 1)
        with pytest.raises(DeadlineExceeded, match="could not start"):
            scheduler.submit(ToolCall("t", deadline=time.time() + 0.05), lambda a: "never")
        assert scheduler.scheduler.queued == 0 and scheduler.scheduler.in_flight == 1
        release.set()
        assert holder.result() is True
        assert scheduler.submit(ToolCall("t"), lambda a: "next") == "next"


def test_twins_with_one_idempotency_key_run_once_from_threads() -> None:
    runs = 0
    gate = threading.Event()

    def tool(attempt: Attempt) -> str:
        nonlocal runs
        runs += 1
        gate.wait(5)
        return "paid " + str(attempt.idempotency_key)[:8]

    call = ToolCall("pay", arguments={"amount": 10}, run_id="r1", call_id="c1")
    with SyncScheduler() as scheduler, ThreadPoolExecutor(max_workers=4) as pool:
        first = pool.submit(scheduler.submit, call, tool)
        _wait_until(lambda: runs == 1)
        twins = [pool.submit(scheduler.submit, call, tool) for _ in range(3)]
        _wait_until(lambda: scheduler.scheduler.metrics.count("reused", "pay") == 3)
        gate.set()
        results = {first.result(), *(t.result() for t in twins), scheduler.submit(call, tool)}
    assert runs == 1 and len(results) == 1


def test_sync_rate_limit_spaces_starts_and_the_timer_wakes_queued_callers() -> None:
    config = SchedulerConfig(tools={"r": ToolLimits(rate=RateLimit(per_second=50, burst=1))})
    starts: list[float] = []
    with SyncScheduler(config) as scheduler, ThreadPoolExecutor(max_workers=6) as pool:
        began = time.monotonic()
        list(
            pool.map(
                lambda _: scheduler.submit(ToolCall("r"), lambda a: starts.append(time.monotonic())), range(6)
            )
        )
    assert len(starts) == 6
    assert max(starts) - began >= 5 / 50 * 0.9  # one start at once, then one per 20 ms


def test_sync_breaker_opens_and_refuses_without_running() -> None:
    config = SchedulerConfig(breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=60))
    runs = 0

    def failing(attempt: Attempt) -> None:
        nonlocal runs
        runs += 1
        raise Transient("down")

    with SyncScheduler(config) as scheduler:
        for _ in range(2):
            with pytest.raises(Transient):
                scheduler.submit(ToolCall("flaky"), failing)
        with pytest.raises(CircuitOpen):
            scheduler.submit(ToolCall("flaky"), failing)
        assert [b.state for b in scheduler.breakers()] == [BreakerState.OPEN]
        assert [d.reason for d in scheduler.dead_letters()] == ["attempts_exhausted"] * 2
    assert runs == 2


def test_close_without_draining_refuses_queued_calls_and_returns_running_ones() -> None:
    before = {t.ident for t in threading.enumerate()}
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})
    release = threading.Event()
    scheduler = SyncScheduler(config)
    with ThreadPoolExecutor(max_workers=2) as pool:
        running = pool.submit(scheduler.submit, ToolCall("t"), lambda a: release.wait(5) and "done")
        _wait_until(lambda: scheduler.scheduler.in_flight == 1)
        waiting = pool.submit(scheduler.submit, ToolCall("t"), lambda a: "never")
        _wait_until(lambda: scheduler.scheduler.queued == 1)
        scheduler.close(drain=False)
        with pytest.raises(SchedulingError, match="shut down"):
            waiting.result()
        release.set()
        assert running.result() == "done"
    assert scheduler.scheduler.in_flight == 0
    assert {t.ident for t in threading.enumerate()} == before


def test_a_newcomer_does_not_take_a_rate_token_a_queued_call_waits_for() -> None:
    config = SchedulerConfig(tools={"r": ToolLimits(rate=RateLimit(per_second=20, burst=1))})
    order: list[str] = []

    def tool(attempt: Attempt) -> str:
        name = str(attempt.call.arguments["name"])
        order.append(name)
        return name

    with SyncScheduler(config) as scheduler, ThreadPoolExecutor(max_workers=2) as pool:
        assert scheduler.submit(ToolCall("r", arguments={"name": "A"}), tool) == "A"  # takes the token
        waiting = pool.submit(scheduler.submit, ToolCall("r", arguments={"name": "B"}), tool)
        _wait_until(lambda: scheduler.scheduler.queued == 1)
        # Hold the loop thread so the rate timer cannot fire: the next token is there after 50 ms,
        # and only the newcomer's own admission can hand it out.
        scheduler._loop.call_soon_threadsafe(time.sleep, 0.3)
        time.sleep(0.1)
        assert scheduler.submit(ToolCall("r", arguments={"name": "N"}), tool) == "N"
        assert waiting.result() == "B"
    assert order == ["A", "B", "N"]


def test_draining_close_finishes_queued_calls_and_cuts_a_retry_backoff_short() -> None:
    policy = RetryPolicy(attempts=3, backoff_initial_s=30, backoff_max_s=30, retry_on=("transient",))
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1), "flaky": ToolLimits(retry=policy)})
    release = threading.Event()
    tries = 0

    def flaky(attempt: Attempt) -> None:
        nonlocal tries
        tries += 1
        raise Transient("down")

    scheduler = SyncScheduler(config, rng=random.Random(1))
    with ThreadPoolExecutor(max_workers=3) as pool:
        running = pool.submit(scheduler.submit, ToolCall("t"), lambda a: release.wait(5) and "first")
        _wait_until(lambda: scheduler.scheduler.in_flight == 1)
        queued = pool.submit(scheduler.submit, ToolCall("t"), lambda a: "second")
        _wait_until(lambda: scheduler.scheduler.queued == 1)
        backing_off = pool.submit(scheduler.submit, ToolCall("flaky"), flaky)
        _wait_until(lambda: scheduler.scheduler.metrics.count("retried", "flaky") == 1)
        began = time.monotonic()
        threading.Timer(0.05, release.set).start()
        scheduler.close()  # drains: the queued call still runs; the backoff is cut short
        assert time.monotonic() - began < 5
        assert running.result() == "first" and queued.result() == "second"
        with pytest.raises(SchedulingError, match="closed"):
            backing_off.result()
    assert tries == 1
    assert [d.reason for d in scheduler.dead_letters()] == ["closed"]


# --- a joined twin's failure, a slot granted after the deadline -------------------------------


def _poll_until(predicate: object, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.002)


class ToolFailed(Exception):
    pass


def test_a_sync_call_joining_a_failed_twin_raises_the_twins_error() -> None:
    """Mutant s2 (_sync.py _keyed: a joined twin's error dropped, its result None returned).

    A call that joins a running twin with the same idempotency key shares its outcome: when the
    twin fails, the joined call raises that error; a failed call never looks like it succeeded.
    """
    started = threading.Event()
    release = threading.Event()
    runs: list[int] = []
    failure = ToolFailed("the charge was declined")

    def tool(attempt: Attempt) -> str:
        runs.append(attempt.number)
        started.set()
        release.wait(10)
        raise failure

    call = ToolCall("pay", arguments={"amount": 10}, run_id="r1", call_id="c1")
    outcomes: dict[str, object] = {}

    def submit(name: str) -> None:
        try:
            outcomes[name] = ("returned", scheduler.submit(call, tool))
        except Exception as exc:
            outcomes[name] = ("raised", exc)

    with SyncScheduler() as scheduler:
        first = threading.Thread(target=submit, args=("first",))
        first.start()
        assert started.wait(10)
        twin = threading.Thread(target=submit, args=("twin",))
        twin.start()
        _poll_until(lambda: scheduler.scheduler.metrics.count("reused", "pay") == 1)  # it joined
        release.set()
        first.join(10)
        twin.join(10)
    assert runs == [1]  # the tool ran once, for both
    assert outcomes["first"] == ("raised", failure)
    assert outcomes["twin"] == ("raised", failure)


def test_a_sync_call_granted_its_slot_after_its_deadline_never_starts() -> None:
    """Mutant s3 (_sync.py _attempts: the check of the deadline after admission dropped).

    The sync twin of test_tasks_explanations_and_breakers.py::test_a_call_granted_its_slot_after_its_deadline_
    never_starts: a waiter granted its slot in time whose thread only runs after the deadline
    (here: the releasing thread keeps the GIL past it) must not start; it raises
    DeadlineExceeded and gives the slot back.
    """
    for _ in range(3):  # a machine too loaded to set the scene up in time gets another go
        if _late_grant_scene():
            return
    pytest.fail("the machine was too slow to set the test up three times")


def _late_grant_scene() -> bool:
    """The scene of the test above; ``False`` when the waiter was not queued in time to show it."""
    config = SchedulerConfig(tools={"x": ToolLimits(concurrency=1)})
    ran: list[int] = []
    outcome: list[object] = []
    deadline = time.time() + 1.5
    in_time = True

    def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ran"

    def late_call() -> None:
        try:
            outcome.append(scheduler.submit(ToolCall("x", deadline=deadline), tool))
        except Exception as exc:
            outcome.append(exc)

    interval = sys.getswitchinterval()
    with SyncScheduler(config) as scheduler:
        late = threading.Thread(target=late_call)

        def hold(attempt: Attempt) -> str:
            nonlocal in_time
            late.start()
            _poll_until(lambda: scheduler.scheduler.queued == 1)  # it waits for the held slot
            in_time = time.time() < deadline - 0.3
            if in_time:
                # From here on this thread keeps the GIL (it never blocks): the waiter is granted
                # the slot when this attempt gives it back, before its deadline, yet its thread
                # runs after.
                sys.setswitchinterval(60.0)
            return "held"

        try:
            assert scheduler.submit(ToolCall("x"), hold) == "held"  # the slot goes to the waiter
            while in_time and time.time() < deadline + 0.05:
                pass  # busy, not sleeping: a sleep would hand the GIL to the waiter
            granted = (scheduler.scheduler.queued, scheduler.scheduler.in_flight)
        finally:
            sys.setswitchinterval(interval)
        late.join(10)
        if not in_time:
            return False
        assert granted == (0, 1)  # the waiter was granted in time; only its thread came late
        assert ran == []
        (error,) = outcome
        assert isinstance(error, DeadlineExceeded), error
        assert "could not start before the call's deadline" in str(error) and error.tool == "x"
        assert scheduler.scheduler.in_flight == 0 and scheduler.scheduler.queued == 0  # slot back
        assert scheduler.submit(ToolCall("x"), lambda a: "ok") == "ok"
    return True


# --- a waiting call's rate token --------------------------------------------------------------


def test_a_sync_call_does_not_take_the_rate_token_a_waiting_call_is_owed() -> None:
    """B waits for the tool's next rate token; the token comes (the bucket's clock moves on)
    before the rate timer has dispatched; C, a sync call that arrives then, queues behind B
    instead of taking the token: calls of one agent to one tool start in arrival order. Kills:
    ``start_now`` starting a call while others wait (``self.queue.size`` dropped: the async
    path checks the queue first, the sync facade and nested calls rely on it)."""
    fake = [0.0]
    limits = SharedLimits(SchedulerConfig(tools={"t": ToolLimits(rate=RateLimit(per_second=0.01, burst=1))}))
    # A real bucket on a clock the test moves: the timer waits 100 real seconds for its token.
    limits.buckets["t"] = TokenBucket(0.01, 1, clock=lambda: fake[0])
    sync = SyncScheduler(limits=limits)
    order: list[str] = []
    sync.submit(ToolCall("t"), lambda attempt: order.append("A"))
    b = threading.Thread(target=sync.submit, args=(ToolCall("t"), lambda attempt: order.append("B")))
    b.start()
    until(lambda: limits.queued == 1)
    fake[0] += 100.0  # one token due; the timer thread is still asleep
    c = threading.Thread(target=sync.submit, args=(ToolCall("t"), lambda attempt: order.append("C")))
    c.start()
    until(lambda: len(order) == 2 and limits.queued == 1)
    fake[0] += 100.0
    with limits.lock:
        limits.dispatch()
    b.join(10)
    c.join(10)
    assert order == ["A", "B", "C"]
    sync.close()
    limits.close()


def until(condition: object, timeout_s: float = 10.0) -> None:
    """Poll ``condition`` (a callable) until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.005)


@pytest.mark.parametrize("with_store", [False, True])
def test_a_tools_concurrent_futures_cancelled_error_reaches_its_caller_as_it_is(
    with_store: bool, tmp_path: Path
) -> None:
    """Kills: with a store, the call's outcome came back through the future of
    ``run_coroutine_threadsafe``, which turns a ``concurrent.futures.CancelledError`` (an
    Exception: what ``result()`` of a cancelled executor future raises in a tool) into
    ``asyncio.CancelledError`` (a BaseException), so the caller got an error that passes every
    ``except Exception``. Rule: the caller gets the tool's own exception, with a store or not."""

    def tool(attempt: Attempt) -> None:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        future.cancel()
        future.result()

    store = SQLiteStore(tmp_path / "s.db") if with_store else None
    try:
        with SyncScheduler(store=store) as sync:
            with pytest.raises(Exception) as raised:  # the type is checked below
                sync.submit(ToolCall("t"), tool)
            assert type(raised.value) is concurrent.futures.CancelledError
            assert sync.submit(ToolCall("t"), lambda attempt: "ok") == "ok"
    finally:
        if store is not None:
            store.close()


@pytest.mark.parametrize("with_store", [False, True], ids=["direct", "with-a-store"])
def test_a_sync_call_on_an_event_loop_waiting_for_that_loops_own_calls_is_refused(
    tmp_path: Path, with_store: bool
) -> None:
    """Kills: a sync call (``SyncScheduler.submit``, so ``Gate.run``) made on the thread of a
    running event loop, for a slot that a call of that loop holds, blocked the thread: the loop
    could never run the call that holds the slot, and both waited forever (silently; with a
    grant's expiry as the deadline, an hour). Rule: ``SchedulingError`` at once, saying to use
    the async method; the loop's call goes on. A sync call from a worker thread (``to_thread``,
    as LangGraph runs sync tools) still waits for the slot and runs; so does one on a loop
    thread whose slot is held by another thread, which frees it."""
    import asyncio

    limits = SharedLimits(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}))
    store = SQLiteStore(tmp_path / "leases.db") if with_store else None
    sync = SyncScheduler(limits=limits, store=store)  # with a store: attempts handed over
    seen: dict[str, object] = {}

    async def main() -> None:
        core = Scheduler(limits=limits, store=store)
        started = asyncio.Event()
        release = asyncio.Event()

        async def holds(attempt: Attempt) -> str:
            started.set()
            await release.wait()
            return "async"

        task = asyncio.create_task(core.submit(ToolCall("t"), holds))
        await started.wait()
        try:
            sync.submit(ToolCall("t"), lambda attempt: "sync on the loop")
        except SchedulingError as exc:
            seen["refused"] = exc
        worker = asyncio.ensure_future(
            asyncio.to_thread(sync.submit, ToolCall("t"), lambda a: "from a worker")
        )
        await asyncio.sleep(0.05)  # the worker queues behind the loop's call
        release.set()
        seen["async"] = await task
        seen["worker"] = await worker
        await core.aclose()

    def another_thread_holds_the_slot() -> None:
        # No call of these limits on this loop: the slot is another thread's, which frees it.
        entered, leave = threading.Event(), threading.Event()

        def holding(attempt: Attempt) -> str:
            entered.set()
            leave.wait(10)
            return "held"

        holder = threading.Thread(target=sync.submit, args=(ToolCall("t"), holding))
        holder.start()
        entered.wait(10)

        async def waits() -> str:
            threading.Timer(0.05, leave.set).start()
            return sync.submit(ToolCall("t"), lambda attempt: "waited on the loop")

        seen["other thread"] = asyncio.run(waits())
        holder.join(10)

    def scenario() -> None:
        asyncio.run(main())
        another_thread_holds_the_slot()

    runner = threading.Thread(target=scenario, daemon=True)
    runner.start()
    runner.join(30)
    assert not runner.is_alive(), "the sync call on the loop thread waited for the loop's own call"
    refused = seen["refused"]
    assert isinstance(refused, SchedulingError) and "Gate.arun" in str(refused) and "tool t" in str(refused)
    assert seen["async"] == "async" and seen["worker"] == "from a worker"
    assert seen["other thread"] == "waited on the loop"
    assert limits.in_flight == 0 and limits.queued == 0
    sync.close()
    if store is not None:
        store.close()


def test_with_a_store_a_sync_call_takes_one_local_rate_token_not_two(tmp_path: Path) -> None:
    """Review R54: with a store, SyncScheduler.submit first asked whether the call could start
    now (to refuse a wait on an event loop's own thread) with ``has_room``, which takes a rate
    token when there is one, and kept it; the core's admission then took another. Every call took
    two tokens, and of a burst of 3 one call started: the next waited for a refill until its
    deadline. The question gives its token back."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(tools={"api": ToolLimits(rate=RateLimit(per_second=0.001, burst=3))})
    with SyncScheduler(config, store=store) as scheduler:
        started = [
            scheduler.submit(ToolCall("api", deadline=time.time() + 2), lambda a: a.number) for _ in range(3)
        ]
        assert started == [1, 1, 1]
        assert scheduler.scheduler.shared.buckets["api"].level < 1  # the burst is spent, once
    store.close()
