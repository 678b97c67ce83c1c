"""Review R95: a call running (holding its slot, maybe a half-open probe) when its event loop was
closed (``loop.close()`` cancels no task) kept its slot for good: every later call of its tool,
on any loop or from a thread, waited, and a half-open breaker whose probe it held refused every
call. Its slot and probe now go back once that is noticed: when a call must wait for a slot (or
is refused for want of a probe), and at ``aclose``. A non-preemptible attempt's work (a sync
function in a thread) may run on after its loop closed: its slot stays taken.

Real schedulers on one ``SharedLimits``, a real second loop in a real thread, closed while the
call awaits an event nobody sets."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time
from typing import Any

import pytest

from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

WAIT_S = 10.0
CONFIG = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


def _start_then_close_loop(
    limits: SharedLimits,
    scheduler: Scheduler | None = None,
    *,
    calls: int = 1,
    preemptible: bool = True,
    close_now: threading.Event | None = None,
    kept: list[Any] | None = None,
) -> threading.Thread:
    """Start ``calls`` calls of tool "t" of ``scheduler`` (None: one made in the thread) on a new
    loop in a thread: the first holds the slot (its tool awaits an event nobody sets), the others
    queue; then close that loop (once ``close_now`` is set, when given). ``kept``: their tasks,
    and a scheduler made here, are appended (``None``: nothing of them is kept, so they are
    garbage once the loop is gone). Returns the thread once the first call's tool runs (used by
    the test_tasks_r96_* closed-loop tests too)."""
    entered = threading.Event()

    def run() -> None:
        made = Scheduler(limits=limits) if scheduler is None else scheduler
        loop = asyncio.new_event_loop()

        async def start() -> None:
            async def hold(_attempt: Attempt) -> None:
                entered.set()
                await asyncio.Event().wait()

            for _ in range(calls):
                task = asyncio.ensure_future(made.submit(ToolCall("t"), hold, preemptible=preemptible))
                if kept is not None:
                    kept.append(task)
            if kept is not None and scheduler is None:
                kept.append(made)
            while not entered.is_set():
                await asyncio.sleep(0)
            await asyncio.sleep(0)  # the other calls queue

        contextvars.Context().run(loop.run_until_complete, start())
        if close_now is not None:
            close_now.wait(WAIT_S)
        loop.close()  # the calls are pending for good

    thread = threading.Thread(target=run)
    thread.start()
    assert entered.wait(WAIT_S)
    return thread


def _run_then_close_loop(
    scheduler: Scheduler, limits: SharedLimits, *, preemptible: bool = True
) -> list[Any]:
    """A call of ``scheduler`` holds the slot on a new loop in a thread, which is closed under it.
    Returns its task, kept (so it is not collected)."""
    kept: list[Any] = []
    thread = _start_then_close_loop(limits, scheduler, preemptible=preemptible, kept=kept)
    thread.join(WAIT_S)
    assert not thread.is_alive() and limits.tool_in_flight == {"t": 1}
    return kept


async def _ran(_attempt: Attempt) -> str:
    return "ran"


async def test_a_call_waiting_for_the_slot_of_a_closed_loops_call_gets_it() -> None:
    limits = SharedLimits(CONFIG)
    dead_side = Scheduler(limits=limits)
    here = Scheduler(limits=limits)
    kept = await asyncio.to_thread(_run_then_close_loop, dead_side, limits)

    assert await asyncio.wait_for(here.submit(ToolCall("t"), _ran), WAIT_S) == "ran"  # waited for good
    assert limits.tool_in_flight == {} and limits.in_flight == 0

    kept.clear()  # collected now, its coroutine closed: nothing given back twice
    gc.collect()
    assert limits.in_flight == 0 and limits.tool_in_flight == {}
    await here.aclose()
    await dead_side.aclose()


def test_a_sync_call_gets_the_slot_of_a_closed_loops_call() -> None:
    limits = SharedLimits(CONFIG)
    dead_side = Scheduler(limits=limits)
    kept = _run_then_close_loop(dead_side, limits)
    with SyncScheduler(limits=limits) as scheduler:
        assert scheduler.submit(ToolCall("t"), lambda _attempt: "ran") == "ran"
    assert limits.in_flight == 0
    del kept


async def test_aclose_gives_back_the_slot_of_a_closed_loops_call() -> None:
    limits = SharedLimits(CONFIG)
    dead_side = Scheduler(limits=limits)
    kept = await asyncio.to_thread(_run_then_close_loop, dead_side, limits)
    await dead_side.aclose()
    assert limits.in_flight == 0 and limits.tool_in_flight == {}
    del kept


async def test_a_non_preemptible_call_of_a_closed_loop_keeps_its_slot() -> None:
    """Its work may run on in a worker thread after its loop closed: its slot is not reclaimed."""
    limits = SharedLimits(CONFIG)
    dead_side = Scheduler(limits=limits)
    kept = await asyncio.to_thread(_run_then_close_loop, dead_side, limits, preemptible=False)
    with limits.lock:
        limits.reclaim_closed()
    assert limits.tool_in_flight == {"t": 1}
    kept.clear()
    gc.collect()
    assert limits.tool_in_flight == {"t": 1}


RESET_S = 0.01
BREAKING = SchedulerConfig(
    breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S, half_open_max_calls=1)
)


async def test_a_half_open_probe_held_by_a_closed_loops_call_goes_back() -> None:
    limits = SharedLimits(BREAKING)
    dead_side = Scheduler(limits=limits)
    here = Scheduler(limits=limits)

    async def down(_attempt: Attempt) -> str:
        raise ConnectionRefusedError("down")

    with pytest.raises(ConnectionRefusedError):
        await here.submit(ToolCall("t"), down)  # opens the breaker
    time.sleep(RESET_S * 2)  # half open: the next call is its one probe
    kept = await asyncio.to_thread(_run_then_close_loop, dead_side, limits)
    assert here.breakers()[0].state is BreakerState.HALF_OPEN

    assert await here.submit(ToolCall("t"), _ran) == "ran"  # was CircuitOpen for good
    assert here.breakers()[0].state is BreakerState.CLOSED
    del kept
    await here.aclose()
    await dead_side.aclose()


def test_a_sync_call_gets_back_the_half_open_probe_of_a_closed_loops_call() -> None:
    """R95's regression review: only the async scheduler asked again once the probes of closed
    loops' calls went back; a process of sync calls alone (``Gate.run``) was refused with
    ``CircuitOpen`` until an async call or a close reclaimed the probe."""
    limits = SharedLimits(BREAKING)
    dead_side = Scheduler(limits=limits)
    with SyncScheduler(limits=limits) as scheduler:

        def down(_attempt: Attempt) -> str:
            raise ConnectionRefusedError("down")

        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("t"), down)  # opens the breaker
        time.sleep(RESET_S * 2)  # half open: the next call is its one probe
        kept = _run_then_close_loop(dead_side, limits)
        assert scheduler.submit(ToolCall("t"), lambda _attempt: "ran") == "ran"
        assert scheduler.breakers()[0].state is BreakerState.CLOSED
    del kept


def test_the_loops_of_calls_run_one_asyncio_run_each_are_not_kept() -> None:
    """R95's regression review: each event loop a scheduler ran a call on was kept in the limits'
    list until a call had to wait, and each new loop read the whole list: a process running each
    request in an ``asyncio.run`` of its own, no call ever waiting, kept one a request."""
    limits = SharedLimits(CONFIG)
    scheduler = Scheduler(limits=limits)
    for _ in range(20):
        assert asyncio.run(scheduler.submit(ToolCall("t"), _ran)) == "ran"
    assert len(limits.loops) <= 1
