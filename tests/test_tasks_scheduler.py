"""The async scheduler core: limits, fairness, queue bounds, deadlines, cancellation, shutdown."""

from __future__ import annotations

import asyncio
import math
import random
import time
from pathlib import Path

import pytest
from _raw_sqlite import opened

from agentgate.errors import DeadlineExceeded, InputError, Overloaded, SchedulingError
from agentgate.store import SQLiteStore
from agentgate.store.leases import LeaseManager
from agentgate.tasks import (
    Attempt,
    PriorityClass,
    RateLimit,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    TenantShare,
    ToolCall,
    ToolLimits,
)


class Gauge:
    """Counts attempts running at once, per key and in all, and remembers the peaks."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def enter(self, *keys: str) -> None:
        for key in (*keys, "*"):
            self.now[key] = self.now.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), self.now[key])

    def leave(self, *keys: str) -> None:
        for key in (*keys, "*"):
            self.now[key] -= 1


async def test_concurrency_limits_never_exceeded_under_1000_submissions() -> None:
    config = SchedulerConfig(
        max_concurrency=12,
        principal_concurrency=3,
        tenant=TenantShare(concurrency=6),
        tools={"search": ToolLimits(concurrency=4), "fetch": ToolLimits(concurrency=5)},
    )
    scheduler = Scheduler(config)
    gauge = Gauge()
    rng = random.Random(7)

    def make(i: int) -> tuple[ToolCall, float]:
        call = ToolCall(
            rng.choice(["search", "fetch", "other"]),
            tenant=f"t{i % 3}",
            principal=f"a{i % 7}",
            arguments={"i": i},
        )
        return call, rng.choice([0, 0.0005, 0.001])

    async def run(call: ToolCall, pause: float) -> int:
        keys = (f"tool:{call.tool}", f"tenant:{call.tenant}", f"agent:{call.tenant}/{call.principal}")

        async def tool(attempt: Attempt) -> int:
            gauge.enter(*keys)
            try:
                await asyncio.sleep(pause)
            finally:
                gauge.leave(*keys)
            return int(attempt.call.arguments["i"])

        return await scheduler.submit(call, tool)

    results = await asyncio.gather(*(run(*make(i)) for i in range(1000)))
    assert sorted(results) == list(range(1000))
    assert gauge.peak["*"] == 12  # the global limit is reached and never exceeded
    assert gauge.peak["tool:search"] <= 4 and gauge.peak["tool:fetch"] <= 5
    assert max(v for k, v in gauge.peak.items() if k.startswith("tenant:")) <= 6
    assert max(v for k, v in gauge.peak.items() if k.startswith("agent:")) <= 3
    assert scheduler.queued == 0 and scheduler.in_flight == 0
    await scheduler.aclose()


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


async def test_flooding_tenant_does_not_starve_an_equal_weight_tenant() -> None:
    # Waits are measured in starts (how many calls started between a call's submission and its
    # own start), so the bound is about the scheduler's order, not about this machine's speed.
    scheduler = Scheduler(SchedulerConfig(max_concurrency=4))
    started = 0
    done: list[str] = []
    waits: dict[str, list[int]] = {"flood": [], "quiet": []}

    async def one(tenant: str) -> None:
        submitted_at = started

        async def tool(attempt: Attempt) -> None:
            nonlocal started
            waits[tenant].append(started - submitted_at)
            started += 1
            await asyncio.sleep(0)
            done.append(tenant)

        await scheduler.submit(ToolCall("work", tenant=tenant, principal=f"{tenant}-agent"), tool)

    flood = [asyncio.create_task(one("flood")) for _ in range(1200)]
    while started < 40:  # the flood has the scheduler to itself for a while, then the quiet tenant comes
        await asyncio.sleep(0)
    quiet = [asyncio.create_task(one("quiet")) for _ in range(150)]
    await asyncio.gather(*quiet)
    first_quiet, last_quiet = done.index("quiet"), len(done) - 1 - done[::-1].index("quiet")
    window = done[first_quiet : last_quiet + 1]
    counts = [window.count("flood"), window.count("quiet")]
    assert jain([float(c) for c in counts]) >= 0.9, counts
    # The quiet tenant's p99 wait is bounded by its own backlog (two tenants: about 2 x 150
    # starts), not by the 1,100-odd flood calls queued ahead of it.
    quiet_waits = sorted(waits["quiet"])
    p99 = quiet_waits[math.ceil(0.99 * len(quiet_waits)) - 1]
    assert p99 <= 2 * 150 + 8, p99
    await asyncio.gather(*flood)
    assert max(waits["flood"]) > 1000  # the flood really was queued ahead
    await scheduler.aclose()


async def test_tenant_weights_share_in_proportion() -> None:
    config = SchedulerConfig(max_concurrency=1, tenants={"gold": TenantShare(weight=3.0)})
    scheduler = Scheduler(config)
    order: list[str] = []

    async def tool(attempt: Attempt) -> None:
        order.append(attempt.call.tenant)
        await asyncio.sleep(0)

    blocker = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await blocker.wait()

    first = asyncio.create_task(scheduler.submit(ToolCall("x", tenant="setup"), hold))
    await asyncio.sleep(0)
    calls = [
        asyncio.create_task(scheduler.submit(ToolCall("x", tenant=t), tool))
        for t in ["gold"] * 60 + ["silver"] * 60
    ]
    await asyncio.sleep(0)
    blocker.set()
    await asyncio.gather(first, *calls)
    head = order[:40]
    assert head.count("gold") == 30 and head.count("silver") == 10  # 3 : 1 while both wait
    await scheduler.aclose()


async def test_agents_share_equally_within_a_tenant_and_fifo_within_an_agent() -> None:
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1))
    order: list[tuple[str, int]] = []
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    async def tool(attempt: Attempt) -> None:
        order.append((attempt.call.principal, int(attempt.call.arguments["i"])))

    first = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    calls = [
        asyncio.create_task(scheduler.submit(ToolCall("x", principal="busy", arguments={"i": i}), tool))
        for i in range(20)
    ]
    calls += [
        asyncio.create_task(scheduler.submit(ToolCall("x", principal="calm", arguments={"i": i}), tool))
        for i in range(3)
    ]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *calls)
    calm_positions = [n for n, (agent, _) in enumerate(order) if agent == "calm"]
    assert max(calm_positions) <= 6  # interleaved with the busy agent, not behind its 20 calls
    busy = [i for agent, i in order if agent == "busy"]
    assert busy == sorted(busy)  # FIFO within one agent
    await scheduler.aclose()


async def test_lower_rank_runs_first() -> None:
    classes = (PriorityClass("interactive", 0), PriorityClass("batch", 5))
    scheduler = Scheduler(
        SchedulerConfig(max_concurrency=1, priority_classes=classes, default_priority="batch")
    )
    order: list[str] = []
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    async def tool(attempt: Attempt) -> None:
        order.append(attempt.call.priority or "batch")

    first = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    calls = [asyncio.create_task(scheduler.submit(ToolCall("x"), tool)) for _ in range(5)]
    calls += [
        asyncio.create_task(scheduler.submit(ToolCall("x", priority="interactive"), tool)) for _ in range(5)
    ]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *calls)
    assert order == ["interactive"] * 5 + ["batch"] * 5
    with pytest.raises(InputError, match="unknown priority class 'urgent'"):
        await scheduler.submit(ToolCall("x", priority="urgent"), tool)
    await scheduler.aclose()


async def test_full_queue_is_refused_with_overloaded() -> None:
    config = SchedulerConfig(max_concurrency=1, max_queued=3, tenants={"small": TenantShare(max_queued=1)})
    scheduler = Scheduler(config)
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    running = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(scheduler.submit(ToolCall("x", tenant="small"), hold))]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded, match="tenant 'small'"):
        await scheduler.submit(ToolCall("x", tenant="small"), hold)
    waiting += [asyncio.create_task(scheduler.submit(ToolCall("x"), hold)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded, match="queue full"):
        await scheduler.submit(ToolCall("x"), hold)
    assert scheduler.metrics.count("shed", "x") == 2
    gate.set()
    await asyncio.gather(running, *waiting)
    await scheduler.aclose()


async def test_a_call_that_cannot_start_before_its_deadline_is_not_started() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"x": ToolLimits(concurrency=1)}))
    gate = asyncio.Event()
    started: list[int] = []

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    async def tool(attempt: Attempt) -> None:
        started.append(attempt.number)

    running = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    with pytest.raises(DeadlineExceeded, match="could not start"):
        await scheduler.submit(ToolCall("x", deadline=time.time() + 0.05), tool)
    with pytest.raises(DeadlineExceeded, match="deadline passed"):
        await scheduler.submit(ToolCall("x", grant_expires_at=time.time() - 1), tool)
    gate.set()
    await running
    assert started == []
    assert scheduler.queued == 0 and scheduler.in_flight == 0  # the expired waiter left no trace
    await scheduler.aclose()


async def test_tool_timeout_cancels_the_running_tool() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"slow": ToolLimits(timeout_s=0.05)}))
    cancelled = asyncio.Event()

    async def slow(attempt: Attempt) -> None:
        assert attempt.deadline is not None and attempt.deadline <= time.time() + 0.06
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(DeadlineExceeded, match="did not finish"):
        await scheduler.submit(ToolCall("slow"), slow)
    assert cancelled.is_set()
    assert scheduler.in_flight == 0
    await scheduler.aclose()


async def test_cancelling_the_caller_cancels_the_tool_and_frees_its_slot() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"x": ToolLimits(concurrency=1)}))
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def tool(attempt: Attempt) -> str:
        entered.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    task = asyncio.create_task(scheduler.submit(ToolCall("x"), tool))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set() and scheduler.in_flight == 0

    async def quick(attempt: Attempt) -> str:
        return "ran"

    assert await scheduler.submit(ToolCall("x"), quick) == "ran"  # the slot came back
    await scheduler.aclose()


async def test_rate_limit_spaces_attempts() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"api": ToolLimits(rate=RateLimit(per_second=50, burst=2))}))
    starts: list[float] = []

    async def tool(attempt: Attempt) -> None:
        starts.append(time.monotonic())

    t0 = time.monotonic()
    await asyncio.gather(*(scheduler.submit(ToolCall("api"), tool) for _ in range(7)))
    # 2 from the burst, then 5 more at 50/s: the last cannot start before 5/50 s = 0.1 s.
    assert len(starts) == 7
    assert starts[-1] - t0 >= 0.1 - 0.005
    for n, started in enumerate(starts):
        assert started - t0 >= max(0, n - 1) / 50 - 0.005  # never ahead of the bucket
    await scheduler.aclose()


async def test_shutdown_drains_then_leaves_no_tasks() -> None:
    scheduler = Scheduler(SchedulerConfig(max_concurrency=2))
    finished: list[int] = []

    async def tool(attempt: Attempt) -> None:
        await asyncio.sleep(0.01)
        finished.append(1)

    calls = [asyncio.create_task(scheduler.submit(ToolCall("x"), tool)) for _ in range(6)]
    await asyncio.sleep(0)
    await scheduler.aclose(drain=True)
    assert len(finished) == 6 and all(c.done() for c in calls)
    with pytest.raises(SchedulingError, match="closed"):
        await scheduler.submit(ToolCall("x"), tool)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_shutdown_without_drain_cancels_running_and_waiting_calls() -> None:
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1))

    async def tool(attempt: Attempt) -> None:
        await asyncio.sleep(10)

    calls = [asyncio.create_task(scheduler.submit(ToolCall("x"), tool)) for _ in range(3)]
    await asyncio.sleep(0.01)
    await scheduler.aclose(drain=False)
    assert all(c.cancelled() for c in calls)
    assert scheduler.queued == 0 and scheduler.in_flight == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_tool_may_submit_a_call_of_its_own() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"inner": ToolLimits(concurrency=1)}))

    async def inner(attempt: Attempt) -> str:
        return "inner"

    async def outer(attempt: Attempt) -> str:
        return "outer+" + await scheduler.submit(ToolCall("inner"), inner)

    assert await scheduler.submit(ToolCall("outer"), outer) == "outer+inner"
    await scheduler.aclose(drain=True, timeout_s=1)  # nothing left in flight: returns at once
    assert scheduler.in_flight == 0 and scheduler.queued == 0


# --- results kept, leases given back, deadlines, dead letters ---------------------------------


async def test_the_result_cache_keeps_no_more_results_than_its_size() -> None:
    """Kills: the result cache bound off by one (``len(results) > result_cache_size + 1`` in
    ``Scheduler.submit``: with ``result_cache_size=1`` a second result did not push out the
    first, and the first call's re-submission reused it instead of running).
    Rule: at most ``result_cache_size`` completed results are kept, the oldest dropped first."""
    scheduler = Scheduler(SchedulerConfig(result_cache_size=1))
    ran: list[str] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.call.call_id or "")
        return f"result of {attempt.call.call_id}"

    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), tool) == "result of c1"
    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c2"), tool) == "result of c2"
    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c2"), tool) == "result of c2"
    assert ran == ["c1", "c2"]  # c2 reused from the cache
    assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), tool) == "result of c1"
    assert ran == ["c1", "c2", "c1"]  # c1 was pushed out by c2: it runs again
    await scheduler.aclose()


def test_a_lease_taken_after_its_call_gave_up_is_given_back(tmp_path: Path) -> None:
    """Kills: ``_Taking.take`` keeping a lease it took after ``abandon`` (the give-back dropped):
    a call cancelled while its worker thread was taking the tool's cross-process slot left the
    slot held, and renewed by the heartbeat, for good: a tool limited to one at once ran at
    none. (The window is a thread race; ``_Taking`` is driven in the order the race produces.)
    Rule: whichever of ``take`` and ``abandon`` comes second gives the lease back."""
    from agentgate.tasks._store_work import _Taking

    store = SQLiteStore(tmp_path / "s.db")
    manager, other = LeaseManager(store, holder="p1"), LeaseManager(store, holder="p2")
    taking = _Taking(manager, "tool:pay", 1, counting=lambda _failure, _key, fn, *args: fn(*args))
    assert taking.abandon() is None  # the call gave up before the worker thread took the slot
    assert taking.take() is None
    assert manager.held() == 0
    assert other.try_acquire("tool:pay", 1) is not None  # the only slot is free
    manager.close()
    other.close()
    store.close()


def _counting() -> tuple[list[int], object]:
    ran: list[int] = []

    def tool(attempt: Attempt) -> int:
        ran.append(len(ran) + 1)
        return len(ran)

    return ran, tool


def test_a_call_that_must_not_reuse_a_result_runs_though_its_key_is_cached() -> None:
    """Kills: ``reuse_result`` ignored when reading the result cache (``SyncScheduler._keyed``
    and ``Scheduler.submit``: ``if key in results``): a call ``Gate.run`` marks as one to run
    (an operator settled its earlier run as not run) got the result kept in memory instead.
    Rule: ``reuse_result=False`` never serves a cached result, and its own is not kept."""
    ran, tool = _counting()
    sync = SyncScheduler()
    try:
        call = ToolCall("t", run_id="r", call_id="c1")
        assert sync.submit(call, tool) == 1  # type: ignore[arg-type]
        assert sync.submit(call, tool) == 1  # type: ignore[arg-type]  # reused
        again = ToolCall("t", run_id="r", call_id="c1", reuse_result=False)
        assert sync.submit(again, tool) == 2  # type: ignore[arg-type]
        assert sync.submit(call, tool) == 1  # type: ignore[arg-type]  # the run of ``again`` not kept
        assert ran == [1, 2]
    finally:
        sync.close()

    async def main() -> list[int]:
        scheduler = Scheduler()
        done: list[int] = []

        async def atool(attempt: Attempt) -> int:
            done.append(len(done) + 1)
            return len(done)

        assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), atool) == 1
        assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1", reuse_result=False), atool) == 2
        assert await scheduler.submit(ToolCall("t", run_id="r", call_id="c1"), atool) == 1
        await scheduler.aclose()
        return done

    assert asyncio.run(main()) == [1, 2]


@pytest.mark.parametrize("expired", ["deadline", "grant_expires_at"])
async def test_a_call_is_bound_by_the_earlier_of_its_deadline_and_its_grants_expiry(expired: str) -> None:
    """Kills: ``ToolCall.absolute_deadline`` taking the later of the two (``max`` for ``min``):
    a call whose grant had expired, given a far deadline of its own, still ran its tool (and
    one whose own deadline had passed ran under a far grant expiry).
    Rule: the call's deadline is the earlier of ``deadline`` and ``grant_expires_at``; past it
    the tool never starts."""
    now = time.time()
    times = {"deadline": now + 600.0, "grant_expires_at": now + 600.0, expired: now - 1.0}
    call = ToolCall("x", **times)  # type: ignore[arg-type]
    assert call.absolute_deadline() == now - 1.0
    scheduler = Scheduler()
    ran: list[int] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ran"

    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(call, tool)
    assert ran == []
    await scheduler.aclose()


async def test_a_dead_letter_the_store_refuses_is_counted_and_the_caller_gets_the_tools_error(
    tmp_path: Path,
) -> None:
    """Kills: ``_store_dead`` catching the wrong error (``ValueError`` for ``StoreError``): a
    store that refused the dead letter (its table gone) replaced the tool's error with a
    ``StoreError``, and the lost record was not counted.
    Rule: the caller gets the tool's own error whether or not its dead letter is stored; a
    dead letter the store refuses is counted (``dead_letter_not_stored``), not hidden."""

    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    scheduler = Scheduler(store=store)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("t"), down)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 0  # stored
    with opened(path) as other:  # another process drops the table: the next write fails
        other.execute("DROP TABLE agentgate_dead_letters")
    with pytest.raises(ConnectionRefusedError, match="upstream down"):
        await scheduler.submit(ToolCall("t"), down)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 1
    assert len(scheduler.dead_letters()) == 2  # kept in memory all the same
    await scheduler.aclose()
    store.close()


async def test_a_naive_datetime_deadline_is_an_input_error_never_a_guess_at_local_time() -> None:
    """Kills: the timezone check of ``_unix_time`` dropped (a naive ``datetime`` deadline was
    read as the host's local time: the same call got another deadline on each host's zone).
    Rule: a datetime deadline or grant expiry must be timezone-aware; a naive one is refused
    with ``InputError`` naming the field, and the tool never runs."""
    from datetime import datetime, timedelta

    from agentgate.errors import InputError

    scheduler = Scheduler()
    ran: list[int] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ran"

    for field in ("deadline", "grant_expires_at"):
        # Refused when the call is made (review R89; before, at submit).
        with pytest.raises(InputError, match=f"{field} must be timezone-aware"):
            call = ToolCall("x", **{field: datetime.now() + timedelta(hours=1)})  # type: ignore[arg-type]
            await scheduler.submit(call, tool)
    assert ran == []
    await scheduler.aclose()


async def test_a_shared_rate_token_due_past_the_deadline_is_not_waited_for(tmp_path: Path) -> None:
    """With the shared bucket (through the store) empty and its next token 5 s away, a call with
    0.3 s left gives up at once, saying no token comes before its deadline. Kills: the deadline
    check in ``_shared_token`` dropped (the call slept 5 s for a token it could not use, then
    was refused as started late)."""
    store = SQLiteStore(tmp_path / "s.db")
    config = SchedulerConfig(tools={"api": ToolLimits(rate=RateLimit(per_second=0.2, burst=1))})
    first, second = Scheduler(config, store=store), Scheduler(config, store=store)  # two processes
    ran: list[int] = []

    async def tool(attempt: Attempt) -> None:
        ran.append(attempt.number)

    await first.submit(ToolCall("api"), tool)
    with pytest.raises(DeadlineExceeded, match="rate token across processes before the deadline"):
        await second.submit(ToolCall("api", deadline=time.time() + 0.3), tool)
    assert ran == [1]
    await first.aclose()
    await second.aclose()
    store.close()


async def test_the_scheduler_keeps_only_the_newest_thousand_dead_letters() -> None:
    """The in-memory dead letters are bounded: after 1,005 calls given up, the newest 1,000 are
    kept, oldest first. Kills: the trim (``del self._dead[:-_DEAD_LETTERS_KEPT]``) dropped (a
    scheduler's memory grew with every failed call)."""
    scheduler = Scheduler()

    async def tool(attempt: Attempt) -> None:
        raise ValueError("no")

    for n in range(1005):
        with pytest.raises(ValueError):
            await scheduler.submit(ToolCall("t", call_id=f"c{n}", run_id="r"), tool)
    letters = scheduler.dead_letters()
    assert len(letters) == 1000
    assert (letters[0].call_id, letters[-1].call_id) == ("c5", "c1004")
    await scheduler.aclose()


@pytest.mark.parametrize("preemptible", [True, False])
@pytest.mark.parametrize("timeout_s", [None, 5.0])
async def test_a_plain_function_submitted_runs_once_and_its_value_is_the_result(
    preemptible: bool, timeout_s: float | None
) -> None:
    """Kills: ``Scheduler.submit`` of a plain (sync) function ran it, then awaited what it
    returned: a ``TypeError`` after the tool's effect, so the call was reported failed (a dead
    letter, the breaker told of an error; a retry would run it again). Rule (as ``Gate.arun``):
    a function that returns a value, not an awaitable, has run; its value is the result."""
    config = SchedulerConfig(tools={"refund": ToolLimits(timeout_s=timeout_s)})
    scheduler = Scheduler(config)
    paid: list[int] = []

    def refund(attempt: Attempt) -> str:
        paid.append(attempt.number)
        return "refunded"

    call = ToolCall("refund", run_id="r1", call_id="c1")
    assert await scheduler.submit(call, refund, preemptible=preemptible) == "refunded"  # type: ignore[arg-type]
    assert paid == [1]
    assert scheduler.dead_letters() == [] and scheduler.breaker("refund").closed
    assert scheduler.in_flight == 0

    def broken(attempt: Attempt) -> str:
        paid.append(-attempt.number)
        raise ValueError("declined")

    with pytest.raises(ValueError, match="declined"):  # its own error, as from a coroutine
        await scheduler.submit(ToolCall("refund"), broken, preemptible=preemptible)  # type: ignore[arg-type]
    assert paid == [1, -1]  # an error class not retried by default: one attempt
    await scheduler.aclose()


@pytest.mark.parametrize("fn", [None, "search", 3])
async def test_a_tool_function_that_cannot_be_called_is_refused_before_anything_runs(fn: object) -> None:
    """Review R54: a tool function that is not callable (None, a tool's name) was run as an
    attempt: it took a slot, its TypeError counted as the tool's failure (retried where
    ``retry_on`` lists ``error``) and became a dead letter. Both entry points refuse it with
    ``InputError``, before a slot is taken or an attempt counted."""
    retry = RetryPolicy(attempts=3, retry_on=("error",), backoff_initial_s=0.0, backoff_max_s=0.0)
    config = SchedulerConfig(default_tool=ToolLimits(idempotent=True, retry=retry))
    scheduler = Scheduler(config)
    with pytest.raises(InputError, match="tool function"):
        await scheduler.submit(ToolCall("t"), fn)  # type: ignore[arg-type]
    assert scheduler.dead_letters() == []
    await scheduler.aclose()
    with SyncScheduler(config) as sync:
        with pytest.raises(InputError, match="tool function"):
            sync.submit(ToolCall("t"), fn)  # type: ignore[arg-type]
        assert sync.scheduler.dead_letters() == []


async def test_a_rate_token_granted_to_a_call_past_its_deadline_goes_back() -> None:
    """Review R54: a queued call granted its start only after its deadline (the loop was busy
    past it) never runs and gave its slot back, but the rate token taken for it was spent: with a
    burst of 2 and a token every 1,000 s, the next waiting call then waited for a refill until
    its own deadline. The token goes back with the slot."""
    config = SchedulerConfig(
        tools={"x": ToolLimits(concurrency=1, rate=RateLimit(per_second=0.001, burst=2))}
    )
    scheduler = Scheduler(config)
    started = asyncio.Event()

    async def busy(attempt: Attempt) -> None:
        started.set()
        await asyncio.sleep(0)  # the other two queue
        await asyncio.sleep(0)
        time.sleep(0.3)  # the loop is busy past the next call's deadline: it is granted late

    async def quick(attempt: Attempt) -> str | None:
        return attempt.call.call_id

    first = asyncio.create_task(scheduler.submit(ToolCall("x", call_id="first"), busy))
    await started.wait()
    late = asyncio.create_task(
        scheduler.submit(ToolCall("x", call_id="late", deadline=time.time() + 0.1), quick)
    )
    after = asyncio.create_task(
        scheduler.submit(ToolCall("x", call_id="after", deadline=time.time() + 2), quick)
    )
    await first
    with pytest.raises(DeadlineExceeded):
        await late
    assert await after == "after"
    await scheduler.aclose()
