"""Review R96: a call of an event loop closed under it gives its slots back when its coroutine is
closed as it is collected (R95). That give-back took ``SharedLimits.lock`` (a ``threading.Lock``),
and the collector runs on whichever thread allocates, which may hold that lock: the thread then
waited on itself, and every caller of the limits after it, for good. It now never waits for the
lock: when the lock is taken, the call is left to the lock's next holder (``closed_calls``), given
back before the next call queues.

A real scheduler on a real second loop in a thread, closed under its calls; the collection is
made explicitly with the lock held (as an allocation inside any ``with limits.lock:`` does)."""

from __future__ import annotations

import gc
import threading

from test_tasks_r95_closed_loop_slot import CONFIG, WAIT_S, _start_then_close_loop

from agentgate.tasks import SharedLimits, SyncScheduler, ToolCall


def _collect_holding_the_lock(limits: SharedLimits) -> bool:
    """Collect the garbage on a thread that holds the lock; True when it came back."""

    def collect() -> None:
        with limits.lock:
            gc.collect()

    thread = threading.Thread(target=collect, daemon=True)  # left blocked when it hangs
    thread.start()
    thread.join(WAIT_S)
    return not thread.is_alive()


def _check(calls: int) -> None:
    limits = SharedLimits(CONFIG)
    enabled = gc.isenabled()
    gc.disable()  # collected below only, with the lock held
    try:
        # The scheduler and its tasks are dropped with the loop (as when a scheduler is
        # dropped): cyclic garbage.
        thread = _start_then_close_loop(limits, calls=calls)
        thread.join(WAIT_S)
        assert not thread.is_alive() and limits.tool_in_flight == {"t": 1}
        assert limits.queued == calls - 1
        if calls > 1:
            # A queued call is kept alive by the queue (its future) until its loop is found
            # closed: its slots go back then, and only then is its task garbage.
            with limits.lock:
                limits.reclaim_closed()
            assert limits.in_flight == 0 and limits.queued == 0
        assert _collect_holding_the_lock(limits)  # hung for good
    finally:
        if enabled:
            gc.enable()
    assert not limits.lock.locked()
    assert limits.closed_calls  # left to the lock's next holder
    with SyncScheduler(limits=limits) as scheduler:  # its call queues: they are given back first
        assert scheduler.submit(ToolCall("t"), lambda _attempt: "ran") == "ran"
    assert limits.in_flight == 0 and limits.tool_in_flight == {} and limits.queued == 0
    assert not limits.closed_calls


def test_a_running_call_collected_while_its_collector_holds_the_lock() -> None:
    _check(1)


def test_queued_calls_collected_while_their_collector_holds_the_lock() -> None:
    """Their slots given back already, the queued ones leave the queue through ``_left_queue``,
    which took the lock too."""
    _check(3)
