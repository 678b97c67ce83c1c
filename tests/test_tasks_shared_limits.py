"""One set of limits for every scheduler of a Gate: sync callers, async callers, several loops.

Real threads and real event loops. Each test states one rule; the waits are bounded (a lost
wake-up fails the test by timeout instead of hanging it), and no test asserts a duration.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentgate.capabilities import Call
from agentgate.errors import CircuitOpen, DeadlineExceeded, InputError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    TenantShare,
    ToolCall,
    ToolLimits,
)

T = TypeVar("T")
WAIT_S = 10.0  # bound on every wait: only a lost wake-up (a bug) comes near it


class LoopThread:
    """An event loop running in its own thread; ``run`` submits a coroutine to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)
        self.loop.close()


@contextmanager
def loop_threads(count: int) -> Iterator[list[LoopThread]]:
    made = [LoopThread() for _ in range(count)]
    try:
        yield made
    finally:
        for one in made:
            one.close()


class Peak:
    """Counts tools running at once, from any thread; ``peak`` is the most seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.done = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1
            self.done += 1


def _wait_until(condition: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.002)


def _async_scheduler(thread: LoopThread, limits: SharedLimits) -> Scheduler:
    """A scheduler made on ``thread``'s loop (as the Gate makes one per loop)."""

    async def make() -> Scheduler:
        return Scheduler(limits=limits)

    return thread.run(make()).result(WAIT_S)


def _aclose(thread: LoopThread, scheduler: Scheduler) -> None:
    thread.run(scheduler.aclose()).result(WAIT_S)


def _blocking_async(
    release: threading.Event, peak: Peak | None = None
) -> Callable[[Attempt], Awaitable[str]]:
    async def tool(attempt: Attempt) -> str:
        if peak is not None:
            peak.enter()
        try:
            await asyncio.to_thread(release.wait, WAIT_S)
        finally:
            if peak is not None:
                peak.leave()
        return "async"

    return tool


def _blocking_sync(release: threading.Event, peak: Peak | None = None) -> Callable[[Attempt], str]:
    def tool(attempt: Attempt) -> str:
        if peak is not None:
            peak.enter()
        try:
            release.wait(WAIT_S)
        finally:
            if peak is not None:
                peak.leave()
        return "sync"

    return tool


def test_sync_and_async_callers_never_exceed_a_tool_limit_together() -> None:
    limits = SharedLimits(SchedulerConfig(tools={"db": ToolLimits(concurrency=3)}))
    peak = Peak()

    def sync_tool(attempt: Attempt) -> int:
        peak.enter()
        time.sleep(0.001)
        peak.leave()
        return 1

    async def async_tool(attempt: Attempt) -> int:
        peak.enter()
        await asyncio.sleep(0.001)
        peak.leave()
        return 1

    with loop_threads(1) as [thread], SyncScheduler(limits=limits) as sync:
        scheduler = _async_scheduler(thread, limits)

        async def async_callers() -> int:
            done = await asyncio.gather(*(scheduler.submit(ToolCall("db"), async_tool) for _ in range(60)))
            return sum(done)

        running = thread.run(async_callers())
        with ThreadPoolExecutor(max_workers=6) as pool:
            sync_done = sum(pool.map(lambda _: sync.submit(ToolCall("db"), sync_tool), range(60)))
        assert running.result(WAIT_S) == 60 and sync_done == 60
        _aclose(thread, scheduler)
    limits.close()
    assert peak.done == 120
    assert peak.peak <= 3
    assert limits.in_flight == 0 and limits.queued == 0


def test_an_async_call_waits_while_sync_calls_hold_every_slot_and_starts_when_one_is_freed() -> None:
    limits = SharedLimits(SchedulerConfig(tools={"db": ToolLimits(concurrency=2)}))
    release_sync = [threading.Event(), threading.Event()]
    started = threading.Event()

    async def async_tool(attempt: Attempt) -> str:
        started.set()
        return "async"

    with loop_threads(1) as [thread], SyncScheduler(limits=limits) as sync, ThreadPoolExecutor(2) as pool:
        scheduler = _async_scheduler(thread, limits)
        holders = [pool.submit(sync.submit, ToolCall("db"), _blocking_sync(event)) for event in release_sync]
        _wait_until(lambda: limits.in_flight == 2)
        waiting = thread.run(scheduler.submit(ToolCall("db"), async_tool))
        _wait_until(lambda: limits.queued == 1)
        assert not started.is_set() and not waiting.done()
        release_sync[0].set()  # a slot freed in a sync caller's thread wakes the task on its loop
        assert waiting.result(WAIT_S) == "async"
        release_sync[1].set()
        assert [h.result(WAIT_S) for h in holders] == ["sync", "sync"]
        _aclose(thread, scheduler)
    limits.close()


def test_a_sync_call_waits_while_async_calls_hold_every_slot_and_starts_when_one_is_freed() -> None:
    limits = SharedLimits(SchedulerConfig(tools={"db": ToolLimits(concurrency=1)}))
    release = threading.Event()
    with loop_threads(1) as [thread], SyncScheduler(limits=limits) as sync, ThreadPoolExecutor(1) as pool:
        scheduler = _async_scheduler(thread, limits)
        holder = thread.run(scheduler.submit(ToolCall("db"), _blocking_async(release)))
        _wait_until(lambda: limits.in_flight == 1)
        waiting = pool.submit(sync.submit, ToolCall("db"), lambda attempt: "sync")
        _wait_until(lambda: limits.queued == 1)
        assert not waiting.done()
        release.set()  # the slot is freed on the loop; the waiting thread is woken
        assert holder.result(WAIT_S) == "async" and waiting.result(WAIT_S) == "sync"
        _aclose(thread, scheduler)
    limits.close()


def test_two_event_loops_in_two_threads_share_a_limit() -> None:
    limits = SharedLimits(SchedulerConfig(tools={"db": ToolLimits(concurrency=2)}))
    peak = Peak()
    with loop_threads(2) as threads:
        schedulers = [_async_scheduler(thread, limits) for thread in threads]
        # Loop 0 holds both slots: loop 1's call queues, and starts when loop 0 frees one.
        release = threading.Event()
        holders = [
            threads[0].run(schedulers[0].submit(ToolCall("db"), _blocking_async(release))) for _ in range(2)
        ]
        _wait_until(lambda: limits.in_flight == 2)
        other_release = threading.Event()
        other_release.set()
        waiting = threads[1].run(schedulers[1].submit(ToolCall("db"), _blocking_async(other_release)))
        _wait_until(lambda: limits.queued == 1)
        assert not waiting.done()
        release.set()
        assert waiting.result(WAIT_S) == "async" and [h.result(WAIT_S) for h in holders] == ["async"] * 2

        async def burst(scheduler: Scheduler) -> None:
            async def tool(attempt: Attempt) -> None:
                peak.enter()
                await asyncio.sleep(0.001)
                peak.leave()

            await asyncio.gather(*(scheduler.submit(ToolCall("db"), tool) for _ in range(50)))

        bursts = [thread.run(burst(s)) for thread, s in zip(threads, schedulers, strict=True)]
        for one in bursts:
            one.result(WAIT_S)
        for thread, scheduler in zip(threads, schedulers, strict=True):
            _aclose(thread, scheduler)
    limits.close()
    assert peak.done == 100 and peak.peak <= 2


def test_separate_limits_would_each_allow_the_limit_which_is_the_defect_shared_limits_fix() -> None:
    """The control: two schedulers with limits of their own run two calls under a limit of one."""
    config = SchedulerConfig(tools={"db": ToolLimits(concurrency=1)})
    both_running = threading.Barrier(2, timeout=WAIT_S)

    def tool(attempt: Attempt) -> str:
        both_running.wait()  # passes only when both calls run at once
        return "ran"

    with SyncScheduler(config) as one, SyncScheduler(config) as two, ThreadPoolExecutor(2) as pool:
        first = pool.submit(one.submit, ToolCall("db"), tool)
        second = pool.submit(two.submit, ToolCall("db"), tool)
        assert first.result(WAIT_S) == second.result(WAIT_S) == "ran"

    shared = SharedLimits(config)
    release = threading.Event()
    with (
        SyncScheduler(limits=shared) as one,
        SyncScheduler(limits=shared) as two,
        ThreadPoolExecutor(2) as pool,
    ):
        first = pool.submit(one.submit, ToolCall("db"), _blocking_sync(release))
        _wait_until(lambda: shared.in_flight == 1)
        second = pool.submit(two.submit, ToolCall("db"), lambda attempt: "second")
        _wait_until(lambda: shared.queued == 1)
        assert not second.done()
        release.set()
        assert first.result(WAIT_S) == "sync" and second.result(WAIT_S) == "second"
    shared.close()


def test_a_breaker_opened_on_the_sync_path_is_open_for_the_async_path() -> None:
    config = SchedulerConfig(breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=60.0))
    limits = SharedLimits(config)
    ran: list[str] = []

    def broken(attempt: Attempt) -> str:
        raise ConnectionError("backend down")

    async def healthy(attempt: Attempt) -> str:
        ran.append("async")
        return "ok"

    with loop_threads(1) as [thread], SyncScheduler(limits=limits) as sync:
        scheduler = _async_scheduler(thread, limits)
        for _ in range(2):
            with pytest.raises(ConnectionError):
                sync.submit(ToolCall("pay"), broken)
        assert scheduler.breaker("tool:pay").state is BreakerState.OPEN
        with pytest.raises(CircuitOpen):
            thread.run(scheduler.submit(ToolCall("pay"), healthy)).result(WAIT_S)
        assert ran == []
        assert [(b.key, b.state) for b in scheduler.breakers()] == [("tool:pay", BreakerState.OPEN)]
        assert scheduler.metrics.count("breaker_opened", "tool:pay") == 1  # told to every scheduler
        assert sync.scheduler.metrics.count("breaker_opened", "tool:pay") == 1
        _aclose(thread, scheduler)
    limits.close()


def test_a_rate_limit_is_one_bucket_for_sync_and_async_callers() -> None:
    # Two tokens, then one every 100 s: the async call cannot get a third within its deadline.
    config = SchedulerConfig(tools={"api": ToolLimits(rate=RateLimit(per_second=0.01, burst=2))})
    limits = SharedLimits(config)
    with loop_threads(1) as [thread], SyncScheduler(limits=limits) as sync:
        scheduler = _async_scheduler(thread, limits)
        assert [sync.submit(ToolCall("api"), lambda attempt: "sync") for _ in range(2)] == ["sync"] * 2

        async def tool(attempt: Attempt) -> str:
            return "async"

        with pytest.raises(DeadlineExceeded):
            call = ToolCall("api", deadline=time.time() + 0.2)
            thread.run(scheduler.submit(call, tool)).result(WAIT_S)
        assert limits.queued == 0  # the call that gave up left the queue
        _aclose(thread, scheduler)
    limits.close()


def test_a_rate_limited_async_waiter_is_started_by_the_shared_timer_after_a_sync_call_took_the_token() -> (
    None
):
    config = SchedulerConfig(tools={"api": ToolLimits(rate=RateLimit(per_second=50.0, burst=1))})
    limits = SharedLimits(config)
    with loop_threads(1) as [thread], SyncScheduler(limits=limits) as sync:
        scheduler = _async_scheduler(thread, limits)
        assert sync.submit(ToolCall("api"), lambda attempt: "sync") == "sync"

        async def tool(attempt: Attempt) -> str:
            return "async"

        async def three() -> list[str]:
            return list(await asyncio.gather(*(scheduler.submit(ToolCall("api"), tool) for _ in range(3))))

        assert thread.run(three()).result(WAIT_S) == ["async"] * 3
        assert scheduler.metrics.count("queued", "api") >= 1  # they waited for tokens, then ran
        _aclose(thread, scheduler)
    assert any(t.name == "agentgate-rate-timer" for t in threading.enumerate())
    limits.close()
    assert not any(t.name == "agentgate-rate-timer" for t in threading.enumerate())  # joined


@pytest.mark.parametrize("who", ["principal", "tenant"])
def test_principal_and_tenant_concurrency_hold_across_sync_and_async_callers(who: str) -> None:
    if who == "principal":
        config = SchedulerConfig(principal_concurrency=1)
    else:
        config = SchedulerConfig(tenant=TenantShare(concurrency=1))

    def call(tool: str, name: str) -> ToolCall:
        return ToolCall(tool, principal=name) if who == "principal" else ToolCall(tool, tenant=name)

    limits = SharedLimits(config)
    release = threading.Event()
    with loop_threads(1) as [thread], SyncScheduler(limits=limits) as sync, ThreadPoolExecutor(1) as pool:
        scheduler = _async_scheduler(thread, limits)
        holder = pool.submit(sync.submit, call("a", "alice"), _blocking_sync(release))
        _wait_until(lambda: limits.in_flight == 1)

        async def tool(attempt: Attempt) -> str:
            return attempt.call.principal if who == "principal" else attempt.call.tenant

        alice = thread.run(scheduler.submit(call("b", "alice"), tool))
        _wait_until(lambda: limits.queued == 1)
        # bob is not blocked by alice's slot, even though alice's call waits ahead of him
        assert thread.run(scheduler.submit(call("b", "bob"), tool)).result(WAIT_S) == "bob"
        assert not alice.done() and limits.queued == 1
        release.set()
        assert holder.result(WAIT_S) == "sync" and alice.result(WAIT_S) == "alice"
        _aclose(thread, scheduler)
    limits.close()


def test_no_lost_wake_up_under_a_mixed_storm_of_sync_threads_and_two_loops() -> None:
    config = SchedulerConfig(max_concurrency=4, tools={"db": ToolLimits(concurrency=2)})
    limits = SharedLimits(config)
    peak_db, peak_all = Peak(), Peak()

    def sync_tool(attempt: Attempt) -> None:
        peak_all.enter()
        if attempt.call.tool == "db":
            peak_db.enter()
            peak_db.leave()
        peak_all.leave()

    async def async_tool(attempt: Attempt) -> None:
        peak_all.enter()
        if attempt.call.tool == "db":
            peak_db.enter()
            await asyncio.sleep(0)
            peak_db.leave()
        await asyncio.sleep(0)
        peak_all.leave()

    with loop_threads(2) as threads, SyncScheduler(limits=limits) as sync:
        schedulers = [_async_scheduler(thread, limits) for thread in threads]

        async def storm(scheduler: Scheduler) -> None:
            calls = [ToolCall("db" if i % 2 else "cache", tenant=f"t{i % 3}") for i in range(150)]
            await asyncio.gather(*(scheduler.submit(call, async_tool) for call in calls))

        running = [thread.run(storm(s)) for thread, s in zip(threads, schedulers, strict=True)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            calls = [ToolCall("db" if i % 2 else "cache", tenant=f"t{i % 3}") for i in range(300)]
            list(pool.map(lambda call: sync.submit(call, sync_tool), calls))
        for one in running:
            one.result(WAIT_S)
        for thread, scheduler in zip(threads, schedulers, strict=True):
            _aclose(thread, scheduler)
    limits.close()
    assert peak_all.done == 600 and peak_all.peak <= 4 and peak_db.peak <= 2
    assert limits.in_flight == 0 and limits.queued == 0


def lookup_policy(keys: dict[str, SigningKey]) -> str:
    """A policy whose agent ``agent`` (key ``keys["agent"]``, root ``keys["root"]``) may call the
    idempotent tool ``lookup``."""
    return f"""
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  agent: {{kind: agent, did: "{keys["agent"].did}", roles: [worker]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
    ttl_s: 600
"""


def test_gate_sync_and_async_calls_share_the_policys_tool_limit(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    policy = lookup_policy(keys)
    config = SchedulerConfig(tools={"lookup": ToolLimits(concurrency=1)})
    gate = Gate(parse_policy(policy, source="shared.yaml"), SQLiteStore(tmp_path / "g.db"), scheduler=config)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auths = [gate.authorize(agent, Call.tool("lookup", {"id": str(i)})) for i in range(2)]
        release = threading.Event()

        def held() -> str:
            release.wait(WAIT_S)
            return "sync"

        async def quick() -> str:
            return "async"

        with loop_threads(1) as [thread], ThreadPoolExecutor(1) as pool:
            holder = pool.submit(gate.run, auths[0], held)
            _wait_until(lambda: gate._limits.in_flight == 1)
            waiting = thread.run(gate.arun(auths[1], quick))
            _wait_until(lambda: gate._limits.queued == 1)
            assert not waiting.done()  # without shared limits, the loop's own scheduler ran it
            release.set()
            assert holder.result(WAIT_S) == "sync" and waiting.result(WAIT_S) == "async"
    finally:
        gate.close()


def test_a_scheduler_given_shared_limits_refuses_another_config() -> None:
    limits = SharedLimits(SchedulerConfig())
    with pytest.raises(InputError, match=r"limits\.config"):
        Scheduler(SchedulerConfig(), limits=limits)
    assert Scheduler(limits.config, limits=limits).config is limits.config
    limits.close()
