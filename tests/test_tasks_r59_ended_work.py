"""Review R59: a call whose work no cancellation stops (``preemptible=False``) and whose caller is
cancelled while that work runs: the work runs to its end, and the call then ends cancelled,
whatever the work ended with.

Real scheduler, real worker threads, no mocks.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

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
