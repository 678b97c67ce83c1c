"""Review R66: a Ctrl-C that lands *inside* the admission of a synchronous call (``start_now``,
``SharedLimits.enqueue``, the fair queue's ``push_entry``, the dispatch that ``enqueue`` runs)
leaves the shared admission state as it was, or as it would be had the call been admitted and
given up: no slot counted twice or never given back, no rate token lost, no entry stranded in
the fair queue, no waiting call woken without its slot counted.

Review R65b closed the windows around ``enqueue`` (tests/test_tasks_r65b_interrupt_window.py),
not the steps inside it, where an interrupt left, for instance, the call in the queue with
``queued`` still False (so ``abandon`` never took it out: it took the slot later and never ran),
the fair queue's counts half updated, or another waiting call woken by the dispatch before its
slot was counted (it then gave back a slot never taken: the in-flight count went below zero and
the concurrency limit let one call too many run).

The interrupt is a real SIGINT (``signal.raise_signal``) raised from a trace function at the
k-th point of agentgate/tasks/ where the calling thread could run a signal handler, for every k
up to the last one before the call waits: each point in turn, deterministically.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from agentgate.errors import DeadlineExceeded, SchedulingError
from agentgate.tasks import RateLimit, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits
from agentgate.tasks._sync import _wait_event, _Wake

TASKS = str(Path(__file__).resolve().parent.parent / "agentgate" / "tasks")
WAIT_S = 10.0  # bound on every wait: only a bug comes near it
JOIN_WAIT_S = 0.02  # how long a joiner armed with an interrupt waits for its deadline (see below)
SLOW = RateLimit(per_second=1e-6, burst=5)  # no token comes back by itself during the test


@pytest.fixture(autouse=True)
def _default_sigint() -> Iterator[None]:
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _wait_no_wall_time(frame: FrameType, event: str, arg: Any) -> None:
    """Make the armed thread's waits for its deadline end at once, through the very same points:
    a queued call's ``_Wake.wait`` gets a timeout of zero as it begins (its lock is then tried,
    not waited on), and a joiner's ``_wait_event`` a deadline ``JOIN_WAIT_S`` away (its first
    step waits that long, the next one finds the deadline passed: the same points as a longer
    wait, unless the thread is held off the CPU that long between the two readings of the clock,
    when the first step is skipped and this run's later points come two earlier). Each run
    past the point where the call waits (tens of them in a sweep) used to sleep until the call's
    deadline; nothing wakes these calls meanwhile, so they end as they did, without the sleep.
    (A profile function's changes to ``frame.f_locals`` are written back to the frame.)"""
    code = frame.f_code
    if event == "call" and code is _Wake.wait.__code__:
        if frame.f_locals["timeout"] is not None:
            frame.f_locals["timeout"] = 0.0
    elif event == "call" and code is _wait_event.__code__:
        deadline, soon = frame.f_locals["deadline"], time.monotonic() + JOIN_WAIT_S
        if deadline is not None and deadline > soon:
            frame.f_locals["deadline"] = soon


def _interrupt_at(k: int) -> tuple[Callable[[FrameType, str, Any], Any], list[int]]:
    """A profile function that raises SIGINT at the k-th point of agentgate/tasks/ where the
    interpreter runs pending signal handlers (the count so far): as a function begins, and as
    a call it makes (to Python or C) returns, which is where CPython checks for them, so the
    interrupt lands in the caller just as a real Ctrl-C would. (A trace function raising at
    every line lands where no signal can: between a ``with`` body and its ``__exit__``.)"""
    count = [0]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        _wait_no_wall_time(frame, event, arg)
        if event in ("call", "return", "c_return") and frame.f_code.co_filename.startswith(TASKS):
            count[0] += 1
            if count[0] == k:
                signal.raise_signal(signal.SIGINT)  # its handler runs here, at this point

    return profile, count


def _submit_interrupted(scheduler: SyncScheduler, call: ToolCall, k: int) -> tuple[bool, int]:
    """Submit ``call`` with the interrupt armed at line ``k``: (interrupted, lines run)."""
    profile, count = _interrupt_at(k)
    # No collection while armed: one that falls on the k-th point runs the finalizers of earlier
    # runs' schedulers, and Python ignores a KeyboardInterrupt raised in a finalizer (review R71:
    # the fair queue's holders lists moved a collection onto a point, and its interrupt was lost).
    collecting = gc.isenabled()  # restore what was found: a caller may have switched it off
    gc.disable()
    sys.setprofile(profile)
    try:
        scheduler.submit(call, lambda attempt: "ran")
    except KeyboardInterrupt:
        return True, count[0]
    except DeadlineExceeded:
        return False, count[0]
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return False, count[0]


def _assert_settled(scheduler: SyncScheduler) -> None:
    """Nothing runs and nothing waits: every count is back at zero, the fair queue is empty."""
    shared = scheduler.scheduler.shared
    with shared.lock:
        assert scheduler._active == 0  # else close() waits for a call that left
        assert shared.in_flight == 0
        assert not shared.tool_in_flight
        assert not shared.tenant_in_flight
        assert not shared.principal_in_flight
        assert shared.queue.size == 0
        assert not shared.queue.tool_sizes
        assert not shared.queue.tenant_sizes
        assert not shared.nested_waiting
        for root in shared.queue._ranks.values():
            assert root.backlog == 0 and not root.tools  # backlog: its classes with calls waiting


def _deadline() -> float:
    return time.time() + 0.5  # reached only by the run past the last point: it ends the sweep


def _sweep(interrupted_at: Callable[[int], tuple[bool, int]]) -> None:
    """Run ``interrupted_at(k)`` for k = 1, 2, ... until the interrupt no longer lands (k is past
    the last point before the call waits)."""
    k = 0
    while True:
        k += 1
        interrupted, points = interrupted_at(k)
        if not interrupted:
            assert k > points
            break
    assert k > 100  # the sweep went through the admission, not only its first steps


def _behind_a_held_slot(k: int) -> tuple[bool, int]:
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1, rate=SLOW)}, max_concurrency=4)
    scheduler = SyncScheduler(config)
    try:
        shared = scheduler.scheduler.shared
        holding, release = threading.Event(), threading.Event()

        def hold(attempt: object) -> str:
            holding.set()
            release.wait(WAIT_S)
            return "held"

        holder = threading.Thread(target=scheduler.submit, args=(ToolCall("t"), hold))
        holder.start()
        assert holding.wait(WAIT_S)
        landed = _submit_interrupted(scheduler, ToolCall("t", deadline=_deadline()), k)
        release.set()
        holder.join(WAIT_S)
        assert not holder.is_alive(), k
        _assert_settled(scheduler)
        level = shared.buckets["t"].level
        assert 3.99 < level < 4.01, (k, level)  # the holder's token only
        assert scheduler.submit(ToolCall("t"), lambda attempt: "ran") == "ran", k
    finally:
        scheduler.close(timeout_s=WAIT_S)
    return landed


def _waking_another_call(k: int) -> tuple[bool, int]:
    config = SchedulerConfig(tools={"r": ToolLimits(rate=RateLimit(per_second=1e-6, burst=1))})
    scheduler = SyncScheduler(config)
    try:
        shared = scheduler.scheduler.shared
        assert scheduler.submit(ToolCall("r"), lambda attempt: "first") == "first"  # the only token
        runs: list[str] = []
        waiting = threading.Thread(
            target=scheduler.submit,
            args=(ToolCall("r", deadline=time.time() + WAIT_S), lambda attempt: runs.append("ran")),
        )
        waiting.start()
        end = time.monotonic() + WAIT_S
        while shared.queued != 1 and time.monotonic() < end:  # the state, not a guess of time
            time.sleep(0.001)
        assert shared.queued == 1
        with shared.lock:
            shared.buckets["r"].give_back()  # a token for the waiting call, its timer not yet due
        landed = _submit_interrupted(scheduler, ToolCall("r", deadline=_deadline()), k)
        with shared.lock:
            if shared.queued:  # interrupted before the dispatch started the waiting call
                shared.buckets["r"].give_back()
                shared.dispatch()
        waiting.join(WAIT_S)
        assert not waiting.is_alive(), k
        assert runs == ["ran"], k
        _assert_settled(scheduler)
    finally:
        scheduler.close(timeout_s=WAIT_S)
    return landed


def _keyed_with_a_joiner(k: int) -> tuple[bool, int]:
    scheduler = SyncScheduler(SchedulerConfig(tools={"k": ToolLimits(concurrency=1)}))
    outcomes: list[str] = []
    joiners: list[threading.Thread] = []

    def join() -> None:
        call = ToolCall("k", run_id="run", call_id="c1", deadline=time.time() + WAIT_S)
        try:
            outcomes.append(scheduler.submit(call, lambda attempt: "twice"))
        except SchedulingError:
            outcomes.append("interrupted")

    def once(attempt: object) -> str:
        joiner = threading.Thread(target=join)
        joiner.start()
        joiners.append(joiner)
        end = time.monotonic() + WAIT_S
        while time.monotonic() < end:  # until the joiner waits for this call's outcome
            with scheduler.scheduler.shared.lock:
                if next(iter(scheduler._twins.values())).finished is not None:
                    break
            time.sleep(0.001)
        return "once"

    try:
        landed = _submit_interrupted(scheduler, ToolCall("k", run_id="run", call_id="c1"), k)
        for joiner in joiners:
            joiner.join(WAIT_S)
            assert not joiner.is_alive(), k
        assert outcomes in ([], ["once"], ["interrupted"]), (k, outcomes)
        assert not scheduler._twins, k
        _assert_settled(scheduler)
    finally:
        scheduler.close(timeout_s=WAIT_S)
    return landed


def test_ctrl_c_at_any_point_of_admission_behind_a_held_slot_leaks_nothing() -> None:
    """Review R66: the only slot of a rate-limited tool is held; a second call, interrupted at
    each point of its admission in turn, leaves no slot, no token and no queue entry behind
    (the holder gives its slot back, a third call then runs at once, ``close`` waits for
    nobody)."""
    _sweep(_behind_a_held_slot)


def test_ctrl_c_at_any_point_of_an_admission_that_wakes_another_call_counts_its_slot() -> None:
    """Review R66: a call waits for a rate token; a second call's ``enqueue`` finds the token
    there and its dispatch starts the first call. Interrupted at each point of that admission
    in turn, the first call is either started with its slot counted or left waiting (and started
    later): it runs once, and every count is back at zero afterwards (none below it)."""
    _sweep(_waking_another_call)


def test_ctrl_c_at_any_point_of_a_keyed_call_leaves_no_twin_behind() -> None:
    """Review R66: a call with an idempotency key, alone, whose tool runs while a second call
    with its key joins it, interrupted at each point of its run in turn (admission, attempt,
    the slot given back, its outcome handed to the joiner): the joiner always gets an outcome at
    once (not at its deadline), nothing is left in the running twins and every count is back at
    zero. Until then a Ctrl-C as the call was registered, or as it ended, left its twin entry
    (later calls of its key joined it and waited until their deadlines) or its joiners asleep."""
    _sweep(_keyed_with_a_joiner)
