"""Review R67: priority inversion through a nested call. A low-class call holds the only slot of
tool ``a``; its tool makes a nested call to tool ``b``, which is busy, and waits for it. An
urgent call waits for ``a``'s slot, so for the low call, so for its nested call. Until then the
nested call queued at the most urgent class of itself and its ancestors (low), behind every
call of the classes between to ``b``: under a steady load of them the urgent call waited until
its deadline, however short the low call's own work. Now the nested call queues at the most
urgent class among the calls waiting for a slot of a tool its ancestors run (priority
inheritance), whichever came first, the urgent call or the nested one.

Real schedulers, the order of starts recorded (positions, not times).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from agentgate.tasks import (
    Attempt,
    PriorityClass,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

CLASSES = (PriorityClass("high", 0), PriorityClass("mid", 1), PriorityClass("low", 2))
CONFIG = SchedulerConfig(
    tools={"a": ToolLimits(concurrency=1), "b": ToolLimits(concurrency=1)},
    priority_classes=CLASSES,
    default_priority="mid",
)
MIDS = 50
WAIT_S = 10.0  # bound on every wait: only a bug comes near it


def _assert_no_inversion(order: list[str]) -> None:
    assert order.count("mid-b") == MIDS
    before = order[: order.index("high-a")]
    assert before.count("mid-b") <= 1, order  # not behind the 50 calls of the class between
    assert before.index("nested-b") < before.index("low-a ends")


@pytest.mark.parametrize("urgent_first", [False, True])
async def test_a_nested_call_that_an_urgent_call_waits_on_queues_at_its_class(urgent_first: bool) -> None:
    """Review R67: the urgent call starts once the low call's nested call and the low call
    have run, not after the 50 mid-class calls to ``b`` queued before it; the same whether
    the urgent call queued before the nested call was made or after."""
    scheduler = Scheduler(CONFIG)
    order: list[str] = []
    release = asyncio.Event()
    go_nested = asyncio.Event()

    async def hold_b(attempt: Attempt) -> None:
        await release.wait()

    async def record(attempt: Attempt) -> None:
        order.append(f"{attempt.call.priority}-{attempt.call.tool}")

    async def nested(attempt: Attempt) -> None:
        order.append("nested-b")

    async def low_a(attempt: Attempt) -> None:
        await go_nested.wait()
        await scheduler.submit(ToolCall("b", priority="low"), nested)
        order.append("low-a ends")

    holder = asyncio.create_task(scheduler.submit(ToolCall("b"), hold_b))
    low = asyncio.create_task(scheduler.submit(ToolCall("a", priority="low"), low_a))
    while scheduler.in_flight < 2:
        await asyncio.sleep(0)
    mids = [asyncio.create_task(scheduler.submit(ToolCall("b", priority="mid"), record)) for _ in range(MIDS)]
    if urgent_first:
        high = asyncio.create_task(scheduler.submit(ToolCall("a", priority="high"), record))
        while scheduler.queued < MIDS + 1:
            await asyncio.sleep(0)
    go_nested.set()
    while scheduler.queued < MIDS + 1:
        await asyncio.sleep(0)
    if not urgent_first:
        high = asyncio.create_task(scheduler.submit(ToolCall("a", priority="high"), record))
        while scheduler.queued < MIDS + 2:
            await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, low, high, *mids), WAIT_S)
    _assert_no_inversion(order)
    assert scheduler.queued == 0 and scheduler.in_flight == 0
    await scheduler.aclose()


def test_sync_callers_a_nested_call_that_an_urgent_call_waits_on_queues_at_its_class() -> None:
    """Review R67: the same with sync callers (the urgent call queued after the nested one):
    the nested call starts before the mid-class calls to ``b`` queued before it."""
    scheduler = SyncScheduler(CONFIG)
    core = scheduler.scheduler
    order: list[str] = []
    lock = threading.Lock()
    release = threading.Event()

    def note(what: str) -> None:
        with lock:
            order.append(what)

    def hold_b(attempt: Attempt) -> None:
        release.wait(WAIT_S)

    def low_a(attempt: Attempt) -> None:
        scheduler.submit(ToolCall("b", priority="low"), lambda attempt: note("nested-b"))
        note("low-a ends")

    def submit(call: ToolCall) -> None:
        scheduler.submit(call, lambda attempt: note(f"{call.priority}-{call.tool}"))

    def until(done: Callable[[], bool]) -> None:
        end = time.monotonic() + WAIT_S
        while not done() and time.monotonic() < end:  # the state, not a guess of time
            time.sleep(0.001)
        assert done()

    threads = [threading.Thread(target=scheduler.submit, args=(ToolCall("b"), hold_b))]
    threads[0].start()
    until(lambda: core.in_flight == 1)
    threads += [threading.Thread(target=submit, args=(ToolCall("b", priority="mid"),)) for _ in range(MIDS)]
    for thread in threads[1:]:
        thread.start()
    until(lambda: core.queued == MIDS)
    threads.append(threading.Thread(target=scheduler.submit, args=(ToolCall("a", priority="low"), low_a)))
    threads[-1].start()
    until(lambda: core.queued == MIDS + 1)
    threads.append(threading.Thread(target=submit, args=(ToolCall("a", priority="high"),)))
    threads[-1].start()
    until(lambda: core.queued == MIDS + 2)
    release.set()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    # The calls to ``b`` start one after another (one slot): the nested call went first.
    # (When the urgent call's thread records its start after the low call ended depends on
    # thread scheduling, not on the queue, so only the order of ``b``'s starts is asserted.)
    assert order.count("mid-b") == MIDS
    assert order[: order.index("nested-b")].count("mid-b") <= 1, order
    assert core.queued == 0 and core.in_flight == 0
    scheduler.close(timeout_s=WAIT_S)
