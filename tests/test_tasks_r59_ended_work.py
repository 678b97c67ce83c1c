"""Review R59: a call whose work no cancellation stops (``preemptible=False``) and whose caller is
cancelled, or whose scheduler shuts down, while that work runs: the work runs to its end, the
call then ends cancelled whatever the work ended with, and what the work returned is not lost
for the calls joined to it nor for its idempotency key.

Real scheduler, real worker threads, no mocks.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentgate.errors import SchedulingError
from agentgate.tasks import Attempt, RetryPolicy, Scheduler, SchedulerConfig, ToolCall, ToolLimits, settled

WAIT_S = 10.0  # bound on every wait: only a bug comes near it


def _keyed() -> ToolCall:
    return ToolCall("t", {"q": 1}, run_id="run", call_id="call-1")


class Transient(Exception):
    error_class = "transient"


class _Work:
    """A sync tool in a worker thread, which no cancellation stops: it ends when let go."""

    def __init__(self, fails: bool = False) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.runs = 0
        self.fails = fails

    def _body(self) -> str:
        self.started.set()
        self.release.wait(WAIT_S)
        self.runs += 1
        if self.fails:
            raise Transient("the tool failed")
        return "done"

    async def attempt(self, attempt: Attempt) -> str:
        return await asyncio.to_thread(self._body)


async def test_a_cancelled_call_whose_work_then_fails_stays_cancelled_and_is_not_retried() -> None:
    """Review R59: the caller of a non-preemptible call was cancelled while its work ran on, and
    the work then failed: ``settled`` raised the work's error, so the cancellation was lost, the
    failure was retried (the tool ran again for a caller that had left) and the caller got the
    tool's error. The call now ends cancelled once its work has ended, the tool run once."""
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.001, backoff_max_s=0.001)
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=retry, idempotent=True)}))
    work = _Work(fails=True)
    owner = asyncio.create_task(scheduler.submit(ToolCall("t"), work.attempt, preemptible=False))
    assert await asyncio.to_thread(work.started.wait, WAIT_S)
    owner.cancel()
    await asyncio.sleep(0)
    work.release.set()
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(asyncio.CancelledError):
            await owner
    assert work.runs == 1
    assert scheduler.metrics.count("retried", "t") == 0
    assert scheduler.dead_letters() == []
    await scheduler.aclose()


async def test_settled_returns_when_the_future_fails() -> None:
    """Review R59: ``settled`` waits for a future whatever it ends with; one that ended with an
    error raised it (the caller's cancellation, the reason it waited, was replaced)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.set_exception, Transient("failed"))
    await settled(future)
    assert future.done() and isinstance(future.exception(), Transient)


@pytest.mark.parametrize("stop", ["cancel", "shutdown"])
async def test_a_cancelled_twins_ended_work_reaches_its_joiner_and_its_key(stop: str) -> None:
    """Review R59: the twin's caller was cancelled (or the scheduler closed without draining)
    while its sync work ran on, and the work then returned: the joiner got SchedulingError (the
    twin was interrupted) and the result was not kept, so a later call with the same key ran the
    tool again. The joiner now gets the result, and the key keeps it."""
    scheduler = Scheduler(SchedulerConfig())
    work = _Work()
    owner = asyncio.create_task(scheduler.submit(_keyed(), work.attempt, preemptible=False))
    assert await asyncio.to_thread(work.started.wait, WAIT_S)
    joiner = asyncio.create_task(scheduler.submit(_keyed(), work.attempt, preemptible=False))
    await asyncio.sleep(0)
    assert scheduler.metrics.count("reused", "t") == 1
    closing = None
    if stop == "cancel":
        owner.cancel()
    else:
        closing = asyncio.create_task(scheduler.aclose(drain=False))
    await asyncio.sleep(0)
    work.release.set()
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(asyncio.CancelledError):
            await owner
        assert await joiner == "done"
        if closing is not None:
            await closing
    if stop == "cancel":
        assert await scheduler.submit(_keyed(), work.attempt) == "done"
        assert scheduler.metrics.count("reused", "t") == 2
        await scheduler.aclose()
    assert work.runs == 1


async def test_a_cancelled_twins_failed_work_still_says_interrupted() -> None:
    """Review R59: work that failed after its caller was cancelled gives the joiner the
    SchedulingError of an interrupted twin (no retry follows a cancellation), with the tool's
    error as its cause; nothing is kept for the key."""
    scheduler = Scheduler(SchedulerConfig())
    work = _Work(fails=True)
    owner = asyncio.create_task(scheduler.submit(_keyed(), work.attempt, preemptible=False))
    assert await asyncio.to_thread(work.started.wait, WAIT_S)
    joiner = asyncio.create_task(scheduler.submit(_keyed(), work.attempt, preemptible=False))
    await asyncio.sleep(0)
    owner.cancel()
    await asyncio.sleep(0)
    work.release.set()
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(asyncio.CancelledError):
            await owner
        with pytest.raises(SchedulingError, match="interrupted") as joined:
            await joiner
    assert isinstance(joined.value.__cause__, Transient)
    assert _keyed().idempotency_key() not in scheduler._results
    await scheduler.aclose()


async def test_a_callers_timeout_around_a_non_preemptible_call_is_still_a_timeout() -> None:
    """Review R59: the cancellation that goes on once the work has ended is the caller's own
    (``asyncio.timeout`` recognizes it by its exact type): a caller's timeout that cut the wait
    raises TimeoutError, and the work's result is kept for its key."""
    scheduler = Scheduler(SchedulerConfig())
    work = _Work()
    asyncio.get_running_loop().call_later(0.1, work.release.set)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await scheduler.submit(_keyed(), work.attempt, preemptible=False)
    assert await scheduler.submit(_keyed(), work.attempt) == "done"
    assert work.runs == 1
    await scheduler.aclose()


async def test_an_outer_call_cancelled_through_a_nested_calls_ended_work_gets_none_of_its_result() -> None:
    """Review R59: the ended work noted for a nested keyed call is that call's only: an outer
    keyed call whose tool awaited it, cancelled with it, gives its own joiner the interrupted
    twin's SchedulingError, not the nested call's result, and keeps nothing for its own key."""
    scheduler = Scheduler(SchedulerConfig())
    work = _Work()
    inner = ToolCall("t", {"q": 2}, run_id="run", call_id="call-inner")

    async def outer_tool(attempt: Attempt) -> str:
        return "outer: " + await scheduler.submit(inner, work.attempt, preemptible=False)

    outer = asyncio.create_task(scheduler.submit(_keyed(), outer_tool))
    assert await asyncio.to_thread(work.started.wait, WAIT_S)
    joiner = asyncio.create_task(scheduler.submit(_keyed(), outer_tool))
    await asyncio.sleep(0)
    outer.cancel()
    await asyncio.sleep(0)
    work.release.set()
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(asyncio.CancelledError):
            await outer
        with pytest.raises(SchedulingError, match="interrupted"):
            await joiner
    assert _keyed().idempotency_key() not in scheduler._results
    assert scheduler._results[inner.idempotency_key()] == "done"
    await scheduler.aclose()
