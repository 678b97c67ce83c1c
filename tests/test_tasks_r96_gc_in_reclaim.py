"""The R96 regression review: a collection during ``SharedLimits.reclaim_closed``'s pass (on the
thread holding the lock) may leave a closed loop's call in ``closed_calls`` after the pass gave
back the ones left before it, its scheduler and loop already gone from what the pass reads; the
pass now gives them back last too. Before, the slot stayed held, the poll stopped (no loop known)
and a sync call queued for it waited until its deadline.

The collection is made to happen at that point (a ``gc.collect()`` as the pass walks the loops),
standing in for one an allocation there triggers. Real schedulers on one ``SharedLimits``, the
holder on a real second loop in a thread."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

from test_tasks_r95_closed_loop_slot import CONFIG, WAIT_S, _start_then_close_loop

from agentgate.tasks import SharedLimits, SyncScheduler, ToolCall


class _CollectedInThePass(list[Any]):
    """``SharedLimits.loops`` whose next walk collects garbage first, once."""

    armed = False

    def __iter__(self) -> Iterator[Any]:
        if self.armed:
            self.armed = False
            gc.collect()
        return super().__iter__()


def test_a_call_left_to_the_lock_holder_during_the_pass_is_given_back_by_it() -> None:
    limits = SharedLimits(CONFIG)
    close_now = threading.Event()
    gc.disable()  # the one collection is the test's
    try:
        holder = _start_then_close_loop(limits, close_now=close_now)

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
