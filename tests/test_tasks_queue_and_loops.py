"""Second review of the task scheduler (R6): what the first review (test_tasks_idempotency.py,
test_tasks_shared_limits.py) did not reach. Real threads and event loops, no mocks.

- a sync call queued under a grant that expires far in the future (year 9999) crashed with
  OverflowError instead of waiting;
- a waiter of an event loop closed in the thread that later gives a slot back crashed that
  thread's call with RuntimeError, losing the tool's result;
- the fair queue kept a node for every tenant and agent it ever saw, so memory grew without
  bound and every dispatch got slower with each new agent;
- the refusals carry what a caller needs: ``CircuitOpen.retry_after_s`` and ``.key``,
  ``Overloaded.limit``, ``DeadlineExceeded.waited_s``;
- a retry policy with many attempts overflowed computing its backoff bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import gc
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable

import pytest
from test_tasks_idempotency import WAIT_S, _hold_slot, _wait_until
from test_tasks_shared_limits import LoopThread, lookup_policy

from agentgate.capabilities import Call
from agentgate.errors import CircuitOpen, DeadlineExceeded, InputError, Overloaded
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store._base import Store
from agentgate.store._sqlite import SQLiteStore
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    PriorityClass,
    RateLimit,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    TenantShare,
    ToolCall,
    ToolLimits,
    _fair,
    backoff_bound,
    full_jitter,
)
from agentgate.tasks._fair import Entry, FairQueue

ONE_SLOT = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


# --- deadlines --------------------------------------------------------------------------------------


def test_a_queued_sync_call_under_a_grant_that_never_practically_expires_waits_and_runs() -> None:
    far = datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC)
    with SyncScheduler(ONE_SLOT) as sync:
        holder, release = _hold_slot(sync)
        got: list[object] = []

        def queued() -> None:
            try:
                got.append(sync.submit(ToolCall("t", grant_expires_at=far), lambda _a: "ran"))
            except BaseException as exc:  # the defect: OverflowError from the wait
                got.append(exc)

        waiter = threading.Thread(target=queued)
        waiter.start()
        _wait_until(lambda: sync.scheduler.queued == 1 or got, "the far-deadline call queued")
        release.set()
        holder.join(WAIT_S)
        waiter.join(WAIT_S)
        assert got == ["ran"]


def test_a_call_that_expires_in_the_queue_says_how_long_it_waited() -> None:
    with SyncScheduler(ONE_SLOT) as sync:
        holder, release = _hold_slot(sync)
        try:
            with pytest.raises(DeadlineExceeded) as caught:
                sync.submit(ToolCall("t", deadline=time.time() + 0.05), lambda _a: "never")
            assert caught.value.waited_s is not None and caught.value.waited_s >= 0.04
            assert caught.value.tool == "t"
        finally:
            release.set()
            holder.join(WAIT_S)


# --- a waiter of a closed loop ------------------------------------------------------------------------


def test_a_slot_given_back_in_the_thread_of_a_closed_loop_with_a_waiter_returns_the_result() -> None:
    """A sync tool runs a throwaway event loop whose task queues behind it, closes the loop, and
    returns: giving its slot back in this thread must drop the dead waiter, not raise."""
    limits = SharedLimits(ONE_SLOT)
    sync = SyncScheduler(limits=limits)
    scheduler = Scheduler(limits=limits)

    async def never_runs(_attempt: Attempt) -> str:
        return "never"

    def tool(_attempt: Attempt) -> str:
        loop = asyncio.new_event_loop()
        tasks: list[asyncio.Future[str]] = []

        async def queue_one() -> None:
            tasks.append(asyncio.ensure_future(scheduler.submit(ToolCall("t"), never_runs)))
            for _ in range(5):
                await asyncio.sleep(0)

        # Run in an empty context: a call the tool makes itself (nested) would run under its
        # slot instead of queueing (docs/tasks.md, calls made by a running tool).
        contextvars.Context().run(loop.run_until_complete, queue_one())
        assert limits.queued == 1
        loop.close()  # its queued task never runs again
        tasks.clear()
        return "tool result"

    try:
        assert sync.submit(ToolCall("t"), tool) == "tool result"
        assert limits.in_flight == 0 and limits.queued == 0
        assert sync.submit(ToolCall("t", deadline=time.time() + 1.0), lambda _a: "next") == "next"
    finally:
        sync.close()
        limits.close()


# --- the fair queue does not grow with every agent it has seen ----------------------------------------


async def test_the_fair_queue_forgets_agents_and_tenants_that_have_nothing_waiting() -> None:
    scheduler = Scheduler(ONE_SLOT)
    release = asyncio.Event()

    async def hold(_attempt: Attempt) -> None:
        await release.wait()

    async def noop(_attempt: Attempt) -> None:
        await asyncio.sleep(0)

    sizes = []
    for round_ in range(6):
        release.clear()
        holder = asyncio.ensure_future(scheduler.submit(ToolCall("t", principal="holder"), hold))
        await asyncio.sleep(0)
        # 200 new agents in two lasting tenants, and 5 new tenants of one agent each, per round.
        calls = [
            asyncio.ensure_future(
                scheduler.submit(ToolCall("t", tenant=f"t{i % 2}", principal=f"p{round_}-{i}"), noop)
            )
            for i in range(200)
        ] + [
            asyncio.ensure_future(scheduler.submit(ToolCall("t", tenant=f"once-{round_}-{i}"), noop))
            for i in range(5)
        ]
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(holder, *calls)
        queue = scheduler.shared.queue
        [klass] = queue._ranks[0].children.values()
        agents = sum(len(tenant.children) for tenant in klass.children.values())
        sizes.append((len(queue._paths), len(klass.children), agents))
    await scheduler.aclose()
    # Without forgetting, round 6 holds 6 x 205 paths and 32 tenants. Kept: at most about two rounds.
    assert all(paths <= 420 and tenants <= 18 and agents <= 420 for paths, tenants, agents in sizes), sizes


# --- what the refusals carry ---------------------------------------------------------------------------


async def test_circuit_open_says_which_breaker_and_when_to_try_again() -> None:
    config = SchedulerConfig(
        tools={"t": ToolLimits()}, breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=30.0)
    )
    scheduler = Scheduler(config)

    async def refused(_attempt: Attempt) -> None:
        raise ConnectionRefusedError("down")

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("t"), refused)
    with pytest.raises(CircuitOpen) as caught:
        await scheduler.submit(ToolCall("t"), refused)
    assert caught.value.key == "tool:t"
    assert caught.value.retry_after_s is not None and 29.0 < caught.value.retry_after_s <= 30.0
    await scheduler.aclose()


def test_overloaded_says_which_queue_bound_refused_the_call() -> None:
    config = SchedulerConfig(
        tools={"t": ToolLimits(concurrency=1)}, tenants={"small": TenantShare(max_queued=0)}, max_queued=1
    )
    with SyncScheduler(config) as sync:
        holder, release = _hold_slot(sync)
        try:
            with pytest.raises(Overloaded) as by_tenant:
                sync.submit(ToolCall("t", tenant="small"), lambda _a: "never")
            assert by_tenant.value.limit == "tenant_max_queued"
            queued = threading.Thread(
                target=lambda: sync.submit(ToolCall("t", deadline=time.time() + 1.0), lambda _a: "x"),
                daemon=True,
            )
            queued.start()
            _wait_until(lambda: sync.scheduler.queued == 1, "one call queued")
            with pytest.raises(Overloaded) as by_all:
                sync.submit(ToolCall("t"), lambda _a: "never")
            assert by_all.value.limit == "max_queued"
        finally:
            release.set()
            holder.join(WAIT_S)


# --- backoff -------------------------------------------------------------------------------------------


def test_the_backoff_bound_of_a_late_retry_is_the_cap_not_an_overflow() -> None:
    policy = RetryPolicy(attempts=5000, backoff_initial_s=0.0, backoff_max_s=0.0)
    assert backoff_bound(policy, 2000) == 0.0
    capped = RetryPolicy(attempts=5000, backoff_initial_s=0.01, backoff_max_s=2.0, multiplier=3.0)
    assert backoff_bound(capped, 4000) == 2.0
    assert 0.0 <= full_jitter(capped, 4000, random.Random(1)) <= 2.0


# --- bad deadlines are refused, not ignored ------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), "soon", True, object()])
def test_a_deadline_that_is_not_a_time_is_an_input_error(bad: object) -> None:
    with pytest.raises(InputError, match="deadline"):
        ToolCall("t", deadline=bad)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="grant_expires_at"):
        ToolCall("t", grant_expires_at=bad)  # type: ignore[arg-type]


def test_a_nan_deadline_no_longer_lets_a_call_run_unbounded() -> None:
    """It used to: NaN compares false with every time, so the sync path ran the tool."""
    ran: list[int] = []
    with SyncScheduler() as sync, pytest.raises(InputError):
        sync.submit(ToolCall("t", deadline=float("nan")), lambda _a: ran.append(1))
    assert ran == []


# --- a call joined to a running twin waits no longer than its own deadline ---------------------------


async def test_an_async_call_joined_to_a_slow_twin_gives_up_at_its_own_deadline() -> None:
    scheduler = Scheduler()
    release = asyncio.Event()

    async def slow(_attempt: Attempt) -> str:
        await release.wait()
        return "done"

    first = asyncio.ensure_future(scheduler.submit(ToolCall("t", run_id="r", call_id="c"), slow))
    await asyncio.sleep(0)
    joiner = ToolCall("t", run_id="r", call_id="c", deadline=time.time() + 0.05)
    with pytest.raises(DeadlineExceeded, match="idempotency key"):
        # WAIT_S bounds the test only: a joiner that waited for the twin would wait for ever (the
        # twin runs until released below), and failed by pytest's timeout, 300 s on (review R72).
        await asyncio.wait_for(scheduler.submit(joiner, slow), WAIT_S)
    # Given up while the twin still runs (observed, not timed: a loaded machine can stall a
    # wall-clock bound).
    assert not first.done()
    release.set()
    assert await first == "done"
    # A joiner without a deadline still gets the twin's result.
    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c"), slow) == "done"
    await scheduler.aclose()


def test_a_sync_call_joined_to_a_slow_twin_gives_up_at_its_own_deadline() -> None:
    running, release = threading.Event(), threading.Event()

    def slow(_attempt: Attempt) -> str:
        running.set()
        assert release.wait(WAIT_S)
        return "done"

    with SyncScheduler() as sync:
        results: list[str] = []
        first = threading.Thread(
            target=lambda: results.append(sync.submit(ToolCall("t", run_id="r", call_id="c"), slow))
        )
        first.start()
        assert running.wait(WAIT_S)
        try:
            with pytest.raises(DeadlineExceeded, match="idempotency key"):
                sync.submit(ToolCall("t", run_id="r", call_id="c", deadline=time.time() + 0.05), slow)
            assert first.is_alive()  # given up while the twin still runs: observed, not timed
        finally:
            release.set()
            first.join(WAIT_S)
        assert results == ["done"]


# --- a scheduler per event loop does not outlive its loop ----------------------------------------------


def _one_call_per_asyncio_run(limits: SharedLimits, store: Store | None, runs: int) -> int:
    """What a Gate does for ``arun``: one scheduler per loop, in a WeakKeyDictionary keyed by the
    loop, all sharing one SharedLimits; ``runs`` times ``asyncio.run``. Returns the schedulers kept."""
    per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Scheduler] = weakref.WeakKeyDictionary()

    async def one() -> None:
        loop = asyncio.get_running_loop()
        scheduler = per_loop.get(loop)
        if scheduler is None:
            scheduler = per_loop[loop] = Scheduler(limits=limits, store=store)

        async def tool(_attempt: Attempt) -> str:
            return "ok"

        assert await scheduler.submit(ToolCall("t"), tool) == "ok"

    for _ in range(runs):
        asyncio.run(one())
    # A job of the scheduler's store pool holds its loop (through the job's future) until the
    # pool's worker drops it, just after the job's result reached the loop: on a loaded machine
    # after the run had ended (once, four workers on two cores, a scheduler was still there).
    deadline = time.monotonic() + WAIT_S
    gc.collect()
    while per_loop and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    return len(per_loop)


def test_a_scheduler_made_for_an_event_loop_goes_when_the_loop_goes() -> None:
    limits = SharedLimits(ONE_SLOT)
    try:
        assert _one_call_per_asyncio_run(limits, None, 20) == 0
        assert len(limits._listeners) == 0  # breaker transitions are not told to dead schedulers
    finally:
        limits.close()


def test_a_dropped_scheduler_with_a_store_stops_its_lease_heartbeat_thread(sqlite_store: Store) -> None:
    def heartbeats() -> int:
        return sum(t.name == "agentgate-lease-heartbeat" and t.is_alive() for t in threading.enumerate())

    before = heartbeats()
    limits = SharedLimits(ONE_SLOT)
    try:
        assert _one_call_per_asyncio_run(limits, sqlite_store, 4) == 0
        _wait_until(lambda: heartbeats() == before, "the heartbeat threads of dropped schedulers stopped")
    finally:
        limits.close()


# --- a cross-process slot taken for a cancelled call is given back --------------------------------------


async def test_a_lease_taken_after_its_caller_was_cancelled_is_given_back(sqlite_store: SQLiteStore) -> None:
    """The lease is taken in a worker thread; cancelling the caller while that thread waits for the
    database used to leave the lease it then took held, and renewed by the heartbeat for ever:
    one cross-process slot lost per such cancellation."""
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})
    scheduler = Scheduler(config, store=sqlite_store)
    assert scheduler._leases is not None
    blocker = sqlite3.connect(sqlite_store.path, isolation_level=None)
    try:

        async def tool(_attempt: Attempt) -> str:
            return "ran"

        assert await scheduler.submit(ToolCall("t"), tool) == "ran"  # tables made, nothing held
        blocker.execute("BEGIN IMMEDIATE")  # the lease's transaction now waits for this writer
        call = asyncio.ensure_future(scheduler.submit(ToolCall("t"), tool))
        await asyncio.sleep(0.1)
        assert not call.done()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        blocker.execute("ROLLBACK")
        for _ in range(200):
            await asyncio.sleep(0.01)
            if scheduler._leases.held() == 0 and not scheduler._leases.rows("tool:t"):
                break
        assert scheduler._leases.held() == 0 and scheduler._leases.rows("tool:t") == []
        # The slot is free for the next call, here or in another process.
        assert await scheduler.submit(ToolCall("t", deadline=time.time() + 2.0), tool) == "ran"
    finally:
        blocker.close()
        await scheduler.aclose()


# --- held up under review: kept as regression guards ----------------------------------------------------


async def test_class_and_tenant_weights_hold_together_over_many_calls() -> None:
    """Two classes of one rank weighted 3:1, three tenants weighted 2:1:1 in each, four slots,
    calls of three tools finishing out of order: every prefix of the starts while all wait keeps
    the shares exactly (stride scheduling), here the first 400 of 1,200."""
    config = SchedulerConfig(
        max_concurrency=4,
        tenants={"a": TenantShare(weight=2), "b": TenantShare(weight=1), "c": TenantShare(weight=1)},
        priority_classes=(PriorityClass("x", 0, 3.0), PriorityClass("y", 0, 1.0)),
        default_priority="x",
    )
    scheduler = Scheduler(config)
    rng = random.Random(5)
    order: list[tuple[str | None, str]] = []
    release = asyncio.Event()

    async def hold(_attempt: Attempt) -> None:
        await release.wait()

    async def run(attempt: Attempt) -> None:
        order.append((attempt.call.priority, attempt.call.tenant))
        await asyncio.sleep(rng.random() * 0.002)

    holders = [asyncio.ensure_future(scheduler.submit(ToolCall("h"), hold)) for _ in range(4)]
    await asyncio.sleep(0)
    calls = [
        asyncio.ensure_future(
            scheduler.submit(
                ToolCall(f"t{i % 3}", tenant="abc"[i % 3], principal=f"p{i % 5}", priority="xy"[i % 2]), run
            )
        )
        for i in range(1200)
    ]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*holders, *calls)
    await scheduler.aclose()
    head = order[:400]
    assert [p for p, _ in head].count("x") == 300
    for klass, total in (("x", 300), ("y", 100)):
        tenants = [t for p, t in head if p == klass]
        assert (tenants.count("a"), tenants.count("b"), tenants.count("c")) == (
            total // 2,
            total // 4,
            total // 4,
        )


def test_cancellations_and_queue_deadlines_from_threads_and_loops_leak_no_slot() -> None:
    """Sync callers with short deadlines and two event loops cancelling their own queued and
    running tasks, all on one SharedLimits with tool, rate, principal and global limits: no limit
    is exceeded and every count is back to zero at the end."""
    config = SchedulerConfig(
        max_concurrency=6,
        principal_concurrency=3,
        tools={"t": ToolLimits(concurrency=2, rate=RateLimit(500, 2)), "u": ToolLimits(concurrency=3)},
    )
    limits = SharedLimits(config)
    sync = SyncScheduler(limits=limits)
    guard = threading.Lock()
    running = {"t": 0, "u": 0}
    peak = {"t": 0, "u": 0}

    def enter(tool: str) -> None:
        with guard:
            running[tool] += 1
            peak[tool] = max(peak[tool], running[tool])

    def leave(tool: str) -> None:
        with guard:
            running[tool] -= 1

    def sync_caller(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(30):
            tool = rng.choice("tu")

            def fn(_attempt: Attempt, tool: str = tool) -> None:
                enter(tool)
                time.sleep(rng.random() * 0.002)
                leave(tool)

            with contextlib.suppress(DeadlineExceeded):
                sync.submit(
                    ToolCall(tool, principal=rng.choice("pq"), deadline=time.time() + rng.random() * 0.05), fn
                )

    def loop_caller(seed: int) -> None:
        rng = random.Random(seed)
        scheduler = Scheduler(limits=limits)

        async def fn(attempt: Attempt) -> None:
            enter(attempt.call.tool)
            try:
                await asyncio.sleep(rng.random() * 0.002)
            finally:
                leave(attempt.call.tool)

        async def main() -> None:
            tasks = [
                asyncio.ensure_future(
                    scheduler.submit(
                        ToolCall(
                            rng.choice("tu"),
                            principal=rng.choice("pqr"),
                            deadline=time.time() + rng.random() * 0.1 if rng.random() < 0.5 else None,
                        ),
                        fn,
                    )
                )
                for _ in range(150)
            ]
            for _ in range(15):
                await asyncio.sleep(0.003)
                for task in rng.sample(tasks, 8):
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await scheduler.aclose()

        asyncio.run(main())

    threads = [threading.Thread(target=sync_caller, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=loop_caller, args=(100 + i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert peak["t"] <= 2 and peak["u"] <= 3
        assert (limits.in_flight, limits.tool_in_flight, limits.principal_in_flight, limits.queued) == (
            0,
            {},
            {},
            0,
        )
        assert sync.submit(ToolCall("t", deadline=time.time() + 1.0), lambda _a: "next") == "next"
    finally:
        sync.close()
        limits.close()


# --- many waiting agents: a heap orders them, in exactly the order the sort gave ------------------------


def fair_queue_workload(
    seed: int,
    pop: Callable[[FairQueue[tuple[int, str]], random.Random], object],
    *,
    agents: int,
    tenants: int,
    weights: int,
) -> list[object]:
    """3,000 random steps on a fair queue: pushes (classes of two ranks, ``tenants`` tenants
    weighted ``1 + t % weights``, up to ``agents`` agents, tools a-c), discards (a deadline or a
    cancellation) and ``pop(queue, rng)``; what the pops returned, in order."""
    rng = random.Random(seed)
    queue: FairQueue[tuple[int, str]] = FairQueue()
    waiting: list[Entry[tuple[int, str]]] = []
    popped: list[object] = []
    classes = [("x", 0, 1.0), ("y", 0, 2.0), ("z", 1, 1.0)]
    for step in range(3000):
        roll = rng.random()
        if roll < 0.55:
            agent, tenant = f"p{rng.randrange(agents)}", rng.randrange(tenants)
            name, rank, weight = rng.choice(classes)
            entry = Entry((step, agent))
            queue.push_entry(
                entry,
                rank,
                name,
                weight,
                f"t{tenant}",
                1.0 + tenant % weights,
                agent,
                rng.choice("abc"),
            )
            waiting.append(entry)
        elif roll < 0.65 and waiting:
            queue.discard(waiting.pop(rng.randrange(len(waiting))))  # a deadline or a cancellation
        else:
            popped.append(pop(queue, rng))
    return popped


def _pop_some_tools(queue: FairQueue[tuple[int, str]], rng: random.Random) -> object:
    blocked = f"t{rng.randrange(4)}"
    return queue.pop(
        set(rng.sample("abc", rng.randrange(1, 4))),
        (lambda tenant, blocked=blocked: tenant == blocked) if rng.random() < 0.3 else None,
        None,
    )


def _fair_queue_run(seed: int) -> list[object]:
    return fair_queue_workload(seed, _pop_some_tools, agents=120, tenants=4, weights=2)


@pytest.mark.parametrize("seed", range(3))
def test_the_heap_for_many_waiting_children_picks_exactly_what_sorting_picks(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to 120 agents wait at once: with heaps from 2 waiting children on, from 32 on (the
    default) and never, the queue hands out the same calls in the same order."""
    monkeypatch.setattr(_fair, "_HEAP_AT", 10**9)
    sorted_order = _fair_queue_run(seed)
    monkeypatch.setattr(_fair, "_HEAP_AT", 2)
    monkeypatch.setattr(_fair, "_HEAP_OFF", 2)
    assert _fair_queue_run(seed) == sorted_order
    monkeypatch.setattr(_fair, "_HEAP_AT", 32)
    monkeypatch.setattr(_fair, "_HEAP_OFF", 8)
    assert _fair_queue_run(seed) == sorted_order
    assert any(item is not None for item in sorted_order)


def _heartbeats() -> int:
    return sum(t.name == "agentgate-lease-heartbeat" and t.is_alive() for t in threading.enumerate())


@pytest.mark.postgres
def test_gate_close_stops_the_lease_heartbeat_of_a_live_loops_scheduler(postgres_url: str) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    policy = lookup_policy(keys)
    before = _heartbeats()
    config = SchedulerConfig(tools={"lookup": ToolLimits(concurrency=1)})
    gate = Gate(parse_policy(policy, source="open.yaml"), open_store(postgres_url), scheduler=config)
    thread = LoopThread()
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "1"}))

        async def quick() -> str:
            return "ok"

        assert thread.run(gate.arun(auth, quick)).result(10) == "ok"
        assert _heartbeats() == before + 1  # the loop's scheduler took a lease: its heartbeat runs
    finally:
        gate.close()
    try:
        assert _heartbeats() == before, (
            "the live loop's scheduler still renewed leases after Gate.close (review R6)"
        )
    finally:
        thread.close()
