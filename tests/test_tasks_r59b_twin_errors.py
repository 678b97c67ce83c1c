"""Review R59: what a call joined to a running twin (the same idempotency key) gets when the
twin ends with a deadline: ``TwinDeadlineExceeded`` when the twin was given up at its own
deadline before the joiner's, and the twin's very error when a ``DeadlineExceeded`` was its
tool's outcome (the tool raised it, or an attempt overran the tool's ``timeout_s``).

Real schedulers (the async core, and the sync facade with and without a store).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from _sync_callers import SyncCallers

from agentgate.errors import DeadlineExceeded, SchedulingError, TwinDeadlineExceeded
from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    PriorityClass,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
TWIN_DEADLINE_S = 0.3  # the twin's own deadline, which passes while it waits or runs
CLASSES = (PriorityClass("urgent", 0), PriorityClass("normal", 1), PriorityClass("low", 2))
CONFIG = SchedulerConfig(max_concurrency=1, priority_classes=CLASSES, default_priority="normal")


def _keyed(deadline: float | None = None) -> ToolCall:
    return ToolCall("x", {"q": 1}, run_id="run", call_id="call-1", deadline=deadline)


def _never(attempt: Attempt) -> str:
    raise AssertionError("a joined call does not run")


async def _never_async(attempt: Attempt) -> str:
    raise AssertionError("a joined call does not run")


def _later(seconds: float | None) -> float | None:
    return None if seconds is None else time.time() + seconds


# --- the twin given up at its own deadline: TwinDeadlineExceeded ---------------------------------


@pytest.mark.parametrize("joiner_deadline_s", [None, WAIT_S])
async def test_a_joiner_whose_twin_ran_out_of_its_own_deadline_gets_twin_deadline_exceeded(
    joiner_deadline_s: float | None,
) -> None:
    """Review R59: a joiner whose twin's deadline passed in the queue got a plain SchedulingError,
    which a caller could not catch apart from a closed scheduler; it now gets
    TwinDeadlineExceeded (a SchedulingError, not a DeadlineExceeded), the twin's error its cause."""
    scheduler = Scheduler(CONFIG)
    gate = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    twin = asyncio.create_task(scheduler.submit(_keyed(time.time() + TWIN_DEADLINE_S), _never_async))
    await asyncio.sleep(0)
    joiner = asyncio.create_task(scheduler.submit(_keyed(_later(joiner_deadline_s)), _never_async))
    await asyncio.sleep(0)
    assert scheduler.metrics.count("reused", "x") == 1
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(DeadlineExceeded) as twin_got:
            await twin
        with pytest.raises(TwinDeadlineExceeded) as joined:
            await joiner
    assert isinstance(joined.value, SchedulingError) and not isinstance(joined.value, DeadlineExceeded)
    assert joined.value.tool == "x"
    assert joined.value.__cause__ is twin_got.value
    gate.set()
    await holder
    await scheduler.aclose()


async def test_a_joiner_whose_twins_attempt_its_own_deadline_cut_gets_twin_deadline_exceeded() -> None:
    """Review R59: an attempt cut by the twin's own deadline while it ran is the twin's deadline,
    not the tool's outcome: the joiner without a deadline gets TwinDeadlineExceeded."""
    scheduler = Scheduler(SchedulerConfig())
    started = asyncio.Event()

    async def slow(attempt: Attempt) -> None:
        started.set()
        await asyncio.sleep(WAIT_S)

    twin = asyncio.create_task(scheduler.submit(_keyed(time.time() + TWIN_DEADLINE_S), slow))
    await started.wait()
    joiner = asyncio.create_task(scheduler.submit(_keyed(), _never_async))
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(DeadlineExceeded) as twin_got:
            await twin
        with pytest.raises(TwinDeadlineExceeded) as joined:
            await joiner
    assert joined.value.__cause__ is twin_got.value
    await scheduler.aclose()


@pytest.mark.parametrize("with_store", [False, True])
def test_a_sync_joiner_whose_twin_ran_out_of_its_own_deadline_gets_twin_deadline_exceeded(
    with_store: bool, tmp_path: Path
) -> None:
    """Review R59: under SyncScheduler too, a joiner whose twin's deadline passed in the queue
    got a plain SchedulingError; it now gets TwinDeadlineExceeded. (With a store the calls are
    scheduled by the async core, without one in the callers' threads.)"""
    outcomes = _sync_race(with_store, tmp_path, twin_deadline_s=2 * TWIN_DEADLINE_S, twin_fn=_never)
    twin_got = outcomes["twin"]
    assert isinstance(twin_got, DeadlineExceeded)
    joined = outcomes["joiner"]
    assert isinstance(joined, TwinDeadlineExceeded), joined
    assert joined.__cause__ is twin_got


# --- a DeadlineExceeded that is the tool's outcome: the twin's very error ------------------------


async def _tool_raises_its_own(own: DeadlineExceeded, gate: asyncio.Event) -> None:
    await gate.wait()
    raise own


async def _tool_whose_nested_scheduler_ran_out(own: DeadlineExceeded, gate: asyncio.Event) -> None:
    await gate.wait()
    inner = Scheduler(SchedulerConfig())

    async def slow(attempt: Attempt) -> None:
        await asyncio.sleep(WAIT_S)

    try:
        await inner.submit(ToolCall("y", deadline=time.time() + 0.01), slow)
    finally:
        await inner.aclose()


@pytest.mark.parametrize("joiner_deadline_s", [None, WAIT_S])
@pytest.mark.parametrize("body", [_tool_raises_its_own, _tool_whose_nested_scheduler_ran_out])
async def test_a_deadline_exceeded_the_twins_tool_raised_reaches_the_joiner_as_the_twin_got_it(
    body: Callable[[DeadlineExceeded, asyncio.Event], Awaitable[None]], joiner_deadline_s: float | None
) -> None:
    """Review R59: a DeadlineExceeded the twin's own tool raised (itself, or from a nested
    scheduler's call) reached a joiner with time left as "not this call's deadline"; the twin had
    no deadline, so the error is the tool's outcome, and the joiner now gets it as the twin did."""
    scheduler = Scheduler(SchedulerConfig())
    started = asyncio.Event()
    gate = asyncio.Event()
    own = DeadlineExceeded("the tool's own deadline passed", tool="x")

    async def tool(attempt: Attempt) -> None:
        started.set()
        await body(own, gate)

    twin = asyncio.create_task(scheduler.submit(_keyed(), tool))
    await started.wait()
    joiner = asyncio.create_task(scheduler.submit(_keyed(_later(joiner_deadline_s)), _never_async))
    await asyncio.sleep(0)
    assert scheduler.metrics.count("reused", "x") == 1
    gate.set()
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(DeadlineExceeded) as twin_got:
            await twin
        with pytest.raises(DeadlineExceeded) as joined:
            await joiner
    assert joined.value is twin_got.value
    if body is _tool_raises_its_own:
        assert twin_got.value is own
    await scheduler.aclose()


async def test_an_attempt_cut_by_the_tools_timeout_reaches_the_joiner_as_the_twin_got_it() -> None:
    """Review R59: an attempt cut by the tool's timeout_s (not by the twin's deadline: it has
    none) is the tool's outcome, the same for every caller: the joiner gets the twin's
    DeadlineExceeded itself, not an error saying a deadline of the twin's passed."""
    scheduler = Scheduler(SchedulerConfig(tools={"x": ToolLimits(timeout_s=TWIN_DEADLINE_S)}))
    started = asyncio.Event()

    async def slow(attempt: Attempt) -> None:
        started.set()
        await asyncio.sleep(WAIT_S)

    twin = asyncio.create_task(scheduler.submit(_keyed(), slow))
    await started.wait()
    joiner = asyncio.create_task(scheduler.submit(_keyed(), _never_async))
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(DeadlineExceeded) as twin_got:
            await twin
        with pytest.raises(DeadlineExceeded) as joined:
            await joiner
    assert joined.value is twin_got.value
    await scheduler.aclose()


@pytest.mark.parametrize("with_store", [False, True])
def test_a_deadline_exceeded_the_twins_sync_tool_raised_reaches_the_joiner_as_the_twin_got_it(
    with_store: bool, tmp_path: Path
) -> None:
    """Review R59: under SyncScheduler a DeadlineExceeded the twin's tool raised reached a joiner
    without a deadline as "not this call's deadline"; it now gets the tool's error itself."""
    own = DeadlineExceeded("the tool's own deadline passed", tool="x")

    def raises(attempt: Attempt) -> str:
        raise own

    outcomes = _sync_race(with_store, tmp_path, twin_deadline_s=None, twin_fn=raises)
    assert outcomes["twin"] is own
    assert outcomes["joiner"] is own


def _sync_race(
    with_store: bool, tmp_path: Path, *, twin_deadline_s: float | None, twin_fn: Callable[[Attempt], str]
) -> dict[str, BaseException | str]:
    """A keyed twin queued behind a held slot, a joiner without a deadline joined to it, then the
    slot released: what each got."""
    store = SQLiteStore(tmp_path / "s.db") if with_store else None
    scheduler = SyncScheduler(CONFIG, store=store)
    core = scheduler.scheduler
    callers = SyncCallers(scheduler, WAIT_S)
    outcomes, release, holding = callers.outcomes, callers.release, callers.holding
    hold, submit, until = callers.hold, callers.submit, callers.until

    try:
        holder = submit("holder", ToolCall("x"), hold)
        until(holding.is_set)
        twin = submit("twin", _keyed(_later(twin_deadline_s)), twin_fn)
        until(lambda: core.queued == 1)
        joiner = submit("joiner", _keyed(), _never)
        until(lambda: core.metrics.count("reused", "x") == 1)
        if twin_deadline_s is None:
            release.set()
        twin.join(WAIT_S)
        joiner.join(WAIT_S)
    finally:
        release.set()
        scheduler.close()
        if store is not None:
            store.close()
    holder.join(WAIT_S)
    return outcomes
