"""The sync facade: same limits from threads, tools run in the caller's thread, no leaked threads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgate.errors import SchedulingError
from agentgate.tasks import Attempt, RetryPolicy, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits


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
