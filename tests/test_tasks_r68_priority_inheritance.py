"""Review R68: priority inheritance follows the calls that lend it, both ways.

Setting: a low-class call holds the only slot of tool ``a``; its tool makes a nested call to tool
``b``, which is busy, with 50 mid-class calls to ``b`` queued before it.

1. A high-class call queued for ``a`` lent its class to the nested call (review R67). When that
   call left the queue (cancelled, its deadline passed) the nested call stayed at the high
   class until it started, ahead of the 50 mid-class calls nobody urgent waited behind.
2. A high-class call joined to the low call (its twin: same idempotency key) raises the twin's
   class, and waits for it, so for its nested call; the nested call queued at the low call's own
   class, behind the 50 mid-class calls.

Real schedulers, the order of starts recorded (positions, not times).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from test_tasks_r67_priority_inversion import CONFIG, MIDS, WAIT_S

from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall


class _Setting:
    """The holder of ``b``, the low call to ``a`` whose tool makes the nested call, the mids."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.order: list[str] = []
        self.release = asyncio.Event()
        self.go_nested = asyncio.Event()
        self.tasks: list[asyncio.Task[object]] = []

    async def hold_b(self, attempt: Attempt) -> None:
        await self.release.wait()

    async def record(self, attempt: Attempt) -> None:
        self.order.append(f"{attempt.call.priority}-{attempt.call.tool}")

    async def nested(self, attempt: Attempt) -> None:
        self.order.append("nested-b")

    async def low_a(self, attempt: Attempt) -> str:
        await self.go_nested.wait()
        await self.scheduler.submit(ToolCall("b", priority="low"), self.nested)
        self.order.append("low-a ends")
        return "low"

    async def until_queued(self, count: int) -> None:
        while self.scheduler.queued != count:
            await asyncio.sleep(0)

    async def start(self, low: ToolCall) -> None:
        scheduler = self.scheduler
        self.tasks.append(asyncio.create_task(scheduler.submit(ToolCall("b"), self.hold_b)))
        self.tasks.append(asyncio.create_task(scheduler.submit(low, self.low_a)))
        while scheduler.in_flight < 2:
            await asyncio.sleep(0)
        for _ in range(MIDS):
            self.tasks.append(
                asyncio.create_task(scheduler.submit(ToolCall("b", priority="mid"), self.record))
            )
        await self.until_queued(MIDS)

    async def finish(self) -> None:
        self.release.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), WAIT_S)
        assert self.scheduler.queued == 0 and self.scheduler.in_flight == 0
        await self.scheduler.aclose()

    def mids_before_nested(self) -> int:
        return self.order[: self.order.index("nested-b")].count("mid-b")


@pytest.mark.parametrize("leaves_by", ["cancellation", "deadline"])
async def test_the_class_lent_by_a_call_that_left_the_queue_is_taken_back(leaves_by: str) -> None:
    """Review R68: the high call queued for ``a`` lifts the nested call to its class; when it
    leaves the queue (cancelled, or its deadline passed) before ``b`` comes free, the nested call
    goes back to the low class: the 50 mid calls, queued before it, start first."""
    setting = _Setting(Scheduler(CONFIG))
    await setting.start(ToolCall("a", priority="low"))
    setting.go_nested.set()
    await setting.until_queued(MIDS + 1)
    loop = asyncio.get_running_loop()
    if leaves_by == "cancellation":
        high = asyncio.create_task(setting.scheduler.submit(ToolCall("a", priority="high"), setting.record))
        await setting.until_queued(MIDS + 2)
        high.cancel()
        with pytest.raises(asyncio.CancelledError):
            await high
    else:
        passed = loop.create_future()
        deadline = ToolCall("a", priority="high", deadline=time.time() + 0.3)
        high = asyncio.create_task(setting.scheduler.submit(deadline, setting.record))
        high.add_done_callback(lambda _: passed.set_result(None))
        await passed
        assert "could not start before the call's deadline (queued" in str(high.exception())
    assert setting.scheduler.queued == MIDS + 1
    await setting.finish()
    assert setting.mids_before_nested() == MIDS, setting.order


async def test_a_class_lent_twice_stays_while_one_lender_still_waits() -> None:
    """Review R68: two high calls queued for ``a``; one is cancelled, the other still waits for
    the low call: the nested call keeps the high class and starts before the mid calls."""
    setting = _Setting(Scheduler(CONFIG))
    await setting.start(ToolCall("a", priority="low"))
    setting.go_nested.set()
    await setting.until_queued(MIDS + 1)
    submit = setting.scheduler.submit
    first = asyncio.create_task(submit(ToolCall("a", priority="high"), setting.record))
    second = asyncio.create_task(submit(ToolCall("a", priority="high"), setting.record))
    setting.tasks.append(second)
    await setting.until_queued(MIDS + 3)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await setting.finish()
    assert setting.mids_before_nested() <= 1, setting.order


@pytest.mark.parametrize("joined_first", [True, False])
async def test_a_nested_call_waits_at_the_class_a_joiner_raised_its_ancestor_to(joined_first: bool) -> None:
    """Review R68: a high call joins the running low call (same idempotency key) and waits for
    it: the low call's nested call queues at the high class, and is moved up to it when it was
    queued before the high call joined. It starts before the 50 mid calls to ``b``."""
    setting = _Setting(Scheduler(CONFIG))
    low = ToolCall("a", priority="low", run_id="run", call_id="c1")
    await setting.start(low)
    joined = ToolCall("a", priority="high", run_id="run", call_id="c1")

    async def never(attempt: Attempt) -> str:
        raise AssertionError("a joined call does not run")

    if joined_first:
        joiner = asyncio.create_task(setting.scheduler.submit(joined, never))
        await asyncio.sleep(0)
        setting.go_nested.set()
        await setting.until_queued(MIDS + 1)
    else:
        setting.go_nested.set()
        await setting.until_queued(MIDS + 1)
        joiner = asyncio.create_task(setting.scheduler.submit(joined, never))
        for _ in range(5):
            await asyncio.sleep(0)
    setting.tasks.append(joiner)
    await setting.finish()
    assert joiner.result() == "low"
    assert setting.mids_before_nested() <= 1, setting.order


def test_sync_callers_a_nested_call_waits_at_the_class_a_joiner_raised_its_ancestor_to() -> None:
    """Review R68: the same with sync callers (the high call joins the low call, started at once,
    before its nested call is made): the nested call starts before the mid calls to ``b``."""
    scheduler = SyncScheduler(CONFIG)
    core = scheduler.scheduler
    order: list[str] = []
    lock = threading.Lock()
    release = threading.Event()
    joined = threading.Event()

    def note(what: str) -> None:
        with lock:
            order.append(what)

    def until(done: Callable[[], bool]) -> None:
        end = time.monotonic() + WAIT_S
        while not done() and time.monotonic() < end:  # the state, not a guess of time
            time.sleep(0.001)
        assert done()

    def low_a(attempt: Attempt) -> str:
        joined.wait(WAIT_S)
        scheduler.submit(ToolCall("b", priority="low"), lambda attempt: note("nested-b"))
        return "low"

    results: list[str] = []

    def submit(call: ToolCall, fn: Callable[[Attempt], object]) -> None:
        results.append(str(scheduler.submit(call, fn)))

    threads = [
        threading.Thread(target=scheduler.submit, args=(ToolCall("b"), lambda a: release.wait(WAIT_S)))
    ]
    threads[0].start()
    until(lambda: core.in_flight == 1)
    for _ in range(MIDS):
        threads.append(
            threading.Thread(target=submit, args=(ToolCall("b", priority="mid"), lambda a: note("mid-b")))
        )
        threads[-1].start()
    until(lambda: core.queued == MIDS)
    low = ToolCall("a", priority="low", run_id="run", call_id="c1")
    threads.append(threading.Thread(target=submit, args=(low, low_a)))
    threads[-1].start()
    until(lambda: core.in_flight == 2)
    high = ToolCall("a", priority="high", run_id="run", call_id="c1")
    threads.append(threading.Thread(target=submit, args=(high, lambda a: "never")))
    threads[-1].start()
    until(lambda: scheduler._twins and len(next(iter(scheduler._twins.values())).callers) == 2)
    joined.set()
    until(lambda: core.queued == MIDS + 1)
    release.set()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    assert results.count("low") == 2
    assert order.count("mid-b") == MIDS
    assert order[: order.index("nested-b")].count("mid-b") <= 1, order
    assert core.queued == 0 and core.in_flight == 0
    scheduler.close(timeout_s=WAIT_S)
