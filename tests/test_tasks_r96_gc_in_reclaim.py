"""The R96 regression review: a collection during ``SharedLimits.reclaim_closed``'s pass (on the
thread holding the lock) may leave a closed loop's call in ``closed_calls`` after the pass gave
back the ones left before it, its scheduler and loop already gone from what the pass reads; the
pass now gives them back last too. Before, the slot stayed held, the poll stopped (no loop known)
and a sync call queued for it waited until its deadline.

The collection is made to happen at that point (a ``gc.collect()`` as the pass walks the loops),
standing in for one an allocation there triggers. Real schedulers on one ``SharedLimits``, the
holder on a real second loop in a thread."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

from test_tasks_r95_closed_loop_slot import CONFIG, WAIT_S

from agentgate.tasks import Attempt, Scheduler, SharedLimits, SyncScheduler, ToolCall


class _CollectedInThePass(list[Any]):
    """``SharedLimits.loops`` whose next walk collects garbage first, once."""

    armed = False

    def __iter__(self) -> Iterator[Any]:
        if self.armed:
            self.armed = False
            gc.collect()
        return super().__iter__()


def _holder(limits: SharedLimits, close_now: threading.Event, entered: threading.Event) -> None:
    """A call of a scheduler on a new loop holds the slot; the loop closes once ``close_now`` is
    set, nothing of it kept (its task is garbage once the loop is gone)."""
    scheduler = Scheduler(limits=limits)
    loop = asyncio.new_event_loop()

    async def start() -> None:
        async def hold(_attempt: Attempt) -> None:
            entered.set()
            await asyncio.Event().wait()

        asyncio.ensure_future(scheduler.submit(ToolCall("t"), hold))  # noqa: RUF006 (kept by nothing: its loop closes under it)
        while not entered.is_set():
            await asyncio.sleep(0)

    contextvars.Context().run(loop.run_until_complete, start())
    close_now.wait(WAIT_S)
    loop.close()


def test_a_call_left_to_the_lock_holder_during_the_pass_is_given_back_by_it() -> None:
    limits = SharedLimits(CONFIG)
    close_now, entered = threading.Event(), threading.Event()
    holder = threading.Thread(target=_holder, args=(limits, close_now, entered))
    gc.disable()  # the one collection is the test's
    try:
        holder.start()
        assert entered.wait(WAIT_S)

        def close_then_collect_in_the_next_pass() -> None:
            time.sleep(0.2)  # the sync call below is queued by then
            close_now.set()
            holder.join(WAIT_S)
            with limits.lock:
                loops = _CollectedInThePass(limits.loops)
                loops.armed = True
                limits.loops = loops

        closer = threading.Thread(target=close_then_collect_in_the_next_pass)
        closer.start()
        with SyncScheduler(limits=limits) as scheduler:
            ran = scheduler.submit(ToolCall("t", deadline=time.time() + WAIT_S), lambda _attempt: "ran")
        closer.join(WAIT_S)
        assert ran == "ran"
        assert not limits.closed_calls and limits.in_flight == 0
    finally:
        gc.enable()
        limits.close()
