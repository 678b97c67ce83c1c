"""Review R59: each call joined to a running twin (the same idempotency key) keeps its own
deadline: a joiner's outcome is never a deadline it did not set.

Real schedulers (the async core, and the sync facade with and without a store).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from _sync_callers import SyncCallers

from agentgate.errors import DeadlineExceeded, SchedulingError
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, PriorityClass, Scheduler, SchedulerConfig, SyncScheduler, ToolCall

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
TWIN_DEADLINE_S = 0.3  # the twin's own deadline, which passes while it waits for a slot
CLASSES = (PriorityClass("urgent", 0), PriorityClass("normal", 1), PriorityClass("low", 2))
CONFIG = SchedulerConfig(max_concurrency=1, priority_classes=CLASSES, default_priority="normal")


def _keyed(deadline: float | None = None) -> ToolCall:
    return ToolCall("x", {"q": 1}, run_id="run", call_id="call-1", deadline=deadline)


def _never(attempt: Attempt) -> str:
    raise AssertionError("a joined call does not run")


async def _never_async(attempt: Attempt) -> str:
    raise AssertionError("a joined call does not run")


@pytest.mark.parametrize("joiner_deadline_s", [None, WAIT_S])
async def test_a_joiner_with_more_time_is_not_given_its_twins_deadline(
    joiner_deadline_s: float | None,
) -> None:
    """Review R59: a joiner with a later deadline (or none) got DeadlineExceeded when its twin's
    earlier deadline passed, as if its own had; it now gets a SchedulingError saying the deadline
    that passed was not this call's."""
    scheduler = Scheduler(CONFIG)
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    twin = asyncio.create_task(scheduler.submit(_keyed(time.time() + TWIN_DEADLINE_S), _never_async))
    await asyncio.sleep(0)
    later = None if joiner_deadline_s is None else time.time() + joiner_deadline_s
    joiner = asyncio.create_task(scheduler.submit(_keyed(later), _never_async))
    await asyncio.sleep(0)
    assert scheduler.metrics.count("reused", "x") == 1
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(DeadlineExceeded):
            await twin
        with pytest.raises(SchedulingError) as joined:
            await joiner
    assert not isinstance(joined.value, DeadlineExceeded)
    assert "not this call's" in str(joined.value)
    assert isinstance(joined.value.__cause__, DeadlineExceeded)
    gate.set()
    await holder
    await scheduler.aclose()


async def test_a_joiner_whose_own_deadline_passed_too_gets_its_own_deadline() -> None:
    """Review R59: a joiner whose deadline is the twin's own still gets DeadlineExceeded (its
    own), whichever of the two is noticed first."""
    scheduler = Scheduler(CONFIG)
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    deadline = time.time() + TWIN_DEADLINE_S
    twin = asyncio.create_task(scheduler.submit(_keyed(deadline), _never_async))
    await asyncio.sleep(0)
    joiner = asyncio.create_task(scheduler.submit(_keyed(deadline), _never_async))
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(DeadlineExceeded):
            await twin
        with pytest.raises(DeadlineExceeded):
            await joiner
    gate.set()
    await holder
    await scheduler.aclose()


@pytest.mark.parametrize("with_store", [False, True])
def test_a_sync_joiner_with_more_time_is_not_given_its_twins_deadline(
    with_store: bool, tmp_path: Path
) -> None:
    """Review R59: under SyncScheduler too, a joiner without a deadline got its twin's
    DeadlineExceeded; it now gets a SchedulingError saying the deadline was not its own. (With
    a store the calls are scheduled by the async core, without one in the callers' threads.)"""
    store = SQLiteStore(tmp_path / "s.db") if with_store else None
    scheduler = SyncScheduler(CONFIG, store=store)
    core = scheduler.scheduler
    callers = SyncCallers(scheduler, WAIT_S)
    outcomes, release, holding = callers.outcomes, callers.release, callers.holding
    hold, submit, until = callers.hold, callers.submit, callers.until

    try:
        holder = submit("holder", ToolCall("x"), hold)
        until(holding.is_set)
        twin = submit("twin", _keyed(time.time() + 2 * TWIN_DEADLINE_S), _never)
        until(lambda: core.queued == 1)
        joiner = submit("joiner", _keyed(), _never)
        until(lambda: core.metrics.count("reused", "x") == 1)
        twin.join(WAIT_S)
        joiner.join(WAIT_S)
    finally:
        release.set()
        scheduler.close()
        if store is not None:
            store.close()
    holder.join(WAIT_S)
    assert isinstance(outcomes["twin"], DeadlineExceeded)
    joined = outcomes["joiner"]
    assert isinstance(joined, SchedulingError) and not isinstance(joined, DeadlineExceeded)
    assert "not this call's" in str(joined)
