"""Review R67: a Ctrl-C that lands as a synchronous keyed call joins its running twin (the same
idempotency key in flight), or as a sync call with a store checks whether it would wait on its
own event loop, leaves the shared state as it was.

Until then a call interrupted after it had put its class among its twin's callers and before it
began to wait for the twin left its class there: the twin kept waiting for a slot at the
joiner's more urgent class (ahead of calls of its own class that came before it) though no
caller of that class waited on it any more. And ``_refuse_handed_wait_on_own_loop`` takes a
rate token to ask whether the call could start now and gives it back: a Ctrl-C between the two
lost it (it refilled only at the bucket's rate, the limit meanwhile stricter than declared).

The interrupt is a real SIGINT raised at the k-th point of agentgate/tasks/ where the calling
thread could run a signal handler, for every k in turn (tests/test_tasks_r66_interrupt_in_enqueue.py
says how).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from test_tasks_r66_interrupt_in_enqueue import _default_sigint, _interrupt_at  # noqa: F401  (the fixture: autouse)

from agentgate.errors import DeadlineExceeded
from agentgate.store import SQLiteStore
from agentgate.tasks import (
    PriorityClass,
    RateLimit,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
CLASSES = (PriorityClass("urgent", 0), PriorityClass("normal", 1))
NORMAL = CLASSES[1]


def _keyed(priority: str, deadline: float | None = None) -> ToolCall:
    return ToolCall("x", {"q": 1}, priority=priority, run_id="run", call_id="c1", deadline=deadline)


def _until(done: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT_S
    while not done() and time.monotonic() < end:  # the state, not a guess of time
        time.sleep(0.001)
    assert done()


def _sweep(interrupted_at: Callable[[int], tuple[bool, int]], least: int) -> None:
    """Run ``interrupted_at(k)`` for k = 1, 2, ... until the interrupt no longer lands."""
    k = 0
    while True:
        k += 1
        interrupted, points = interrupted_at(k)
        if not interrupted:
            assert k > points
            break
    assert k > least  # the sweep went through the steps, not only the first ones


def _joining_a_queued_twin(k: int) -> tuple[bool, int]:
    config = SchedulerConfig(max_concurrency=1, priority_classes=CLASSES, default_priority="normal")
    scheduler = SyncScheduler(config)
    shared = scheduler.scheduler.shared
    release = threading.Event()
    holding = threading.Event()
    outcomes: list[str] = []

    def hold(attempt: object) -> str:
        holding.set()
        release.wait(WAIT_S)
        return "held"

    def twin() -> None:
        outcomes.append(scheduler.submit(_keyed("normal"), lambda attempt: "twin"))

    threads = [threading.Thread(target=scheduler.submit, args=(ToolCall("x"), hold))]
    threads[0].start()
    try:
        assert holding.wait(WAIT_S)
        threads.append(threading.Thread(target=twin))
        threads[1].start()
        _until(lambda: shared.queued == 1)
        with shared.lock:
            (running,) = scheduler._twins.values()
            assert running.waiter is not None
        profile, count = _interrupt_at(k)
        sys.setprofile(profile)
        try:
            scheduler.submit(_keyed("urgent", time.time() + 0.3), lambda attempt: "never")
        except KeyboardInterrupt:
            landed = True
        except DeadlineExceeded:
            landed = False
        finally:
            sys.setprofile(None)
        with shared.lock:
            # The joiner left: the twin waits at its own class again, its caller alone.
            assert running.callers == [NORMAL], (k, running.callers)
            assert running.priority == NORMAL, (k, running.priority)
            assert shared.queue.rank_of(running.waiter) == NORMAL.rank, k
        release.set()
        for thread in threads:
            thread.join(WAIT_S)
            assert not thread.is_alive(), k
        assert outcomes == ["twin"], k
        assert not scheduler._twins, k
    finally:
        release.set()
        scheduler.close(timeout_s=WAIT_S)
    return landed, count[0]


def test_ctrl_c_as_a_call_joins_its_twin_takes_its_class_out_of_the_twin() -> None:
    """Review R67: an urgent call joins a normal-class twin queued for the only slot and is
    interrupted at each point of its join in turn (and, past the last one, gives up at its own
    deadline): the twin always waits at its own class again, its caller alone among its callers.
    Until then a Ctrl-C after the join and before the wait left the urgent class in the twin's
    callers and the twin queued at it."""
    _sweep(_joining_a_queued_twin, 10)


def _asking_with_a_store(tmp_path: Path, k: int) -> tuple[bool, int]:
    store = SQLiteStore(tmp_path / f"s{k}.db")
    config = SchedulerConfig(tools={"r": ToolLimits(rate=RateLimit(per_second=1e-6, burst=3))})
    scheduler = SyncScheduler(config, store=store)
    shared = scheduler.scheduler.shared
    profile, count = _interrupt_at(k)
    try:
        sys.setprofile(profile)
        try:
            scheduler._refuse_handed_wait_on_own_loop(ToolCall("r"))
        except KeyboardInterrupt:
            landed = True
        else:
            landed = False
        finally:
            sys.setprofile(None)
        with shared.lock:
            bucket = shared.buckets.get("r")
            level = 3.0 if bucket is None else bucket.level
        assert 2.99 < level < 3.01, (k, level)  # every token still there: it only asked
    finally:
        scheduler.close(timeout_s=WAIT_S)
        store.close()
    return landed, count[0]


def test_ctrl_c_as_a_handed_call_asks_for_room_loses_no_rate_token(tmp_path: Path) -> None:
    """Review R67: with a store, a sync call first asks whether it could start now in this
    process, which takes a rate token and gives it back; interrupted at each point of that in
    turn, the bucket holds every token afterwards. Until then a Ctrl-C between the take and the
    give-back lost the token until the bucket refilled it."""
    _sweep(lambda k: _asking_with_a_store(tmp_path, k), 3)
