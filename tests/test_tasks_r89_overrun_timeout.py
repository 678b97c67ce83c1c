"""Review R89: a tool that ran past its ``timeout_s`` and then failed ``transient`` was retried by
the sync scheduler (and by the async one for work it does not cut: ``preemptible=False``, which
the docs say behaves as the sync scheduler), a tool not safe to repeat run again, while the async
core cuts such an attempt at ``timeout_s`` as a ``timeout`` and does not retry it. An attempt that
overran its ``timeout_s`` and failed ``transient`` or ``connection`` is now a ``timeout`` in every
mode: retried only as a timeout is, counted by the breaker as one, and so recorded in its dead
letter; the caller of an attempt that was not cut still gets the tool's own error. (A late
``error`` or custom class keeps its class since R89b: test_tasks_r89b_late_error.py.)"""

from __future__ import annotations

import asyncio
import time

import pytest

from agentgate.errors import DeadlineExceeded
from agentgate.tasks import (
    Attempt,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

TIMEOUT_S = 0.01
RETRY = RetryPolicy(attempts=3, backoff_initial_s=0, backoff_max_s=0)  # retry_on: transient
CONFIG = SchedulerConfig(
    tools={
        "late": ToolLimits(timeout_s=TIMEOUT_S, retry=RETRY),
        "prompt": ToolLimits(timeout_s=60, retry=RETRY),
        "untimed": ToolLimits(retry=RETRY),
    }
)
MODES = pytest.mark.parametrize("mode", ["sync", "async-not-preemptible", "async"])


def _refused_after(seconds: float, ran: list[int]) -> None:
    ran.append(1)
    time.sleep(seconds)
    raise ConnectionRefusedError("refused")


def _run(mode: str, tool: str, seconds: float) -> tuple[int, BaseException, list[list[str]]]:
    """Submit one call of ``tool`` failing ``transient`` after ``seconds``: how many attempts ran,
    what the caller got, and each dead letter's error classes."""
    ran: list[int] = []
    call = ToolCall(tool, {})
    if mode == "sync":
        with SyncScheduler(CONFIG) as scheduler, pytest.raises(Exception) as failed:
            scheduler.submit(call, lambda attempt: _refused_after(seconds, ran))
        letters = scheduler.dead_letters()
    else:

        async def attempt_async(attempt: Attempt) -> None:
            if mode == "async":
                ran.append(1)
                await asyncio.sleep(seconds)
                raise ConnectionRefusedError("refused")
            await asyncio.to_thread(_refused_after, seconds, ran)

        async def main() -> None:
            scheduler = Scheduler(CONFIG)
            try:
                await scheduler.submit(call, attempt_async, preemptible=mode == "async")
            finally:
                await scheduler.aclose()
                letters.extend(scheduler.dead_letters())

        letters = []
        with pytest.raises(Exception) as failed:
            asyncio.run(main())
    return len(ran), failed.value, [[error.error_class for error in letter.errors] for letter in letters]


@MODES
def test_a_transient_failure_past_the_tools_timeout_is_a_timeout_not_retried(mode: str) -> None:
    attempts, error, classes = _run(mode, "late", TIMEOUT_S * 3)
    assert attempts == 1, "a tool not safe to repeat ran again after overrunning its timeout"
    assert classes == [["timeout"]]
    # The attempt the async core cut ends in its DeadlineExceeded; one run to its end, in its own error.
    assert type(error) is (DeadlineExceeded if mode == "async" else ConnectionRefusedError)


@MODES
@pytest.mark.parametrize("tool", ["prompt", "untimed"])
def test_a_transient_failure_within_the_tools_timeout_is_still_retried(mode: str, tool: str) -> None:
    attempts, error, classes = _run(mode, tool, 0)
    assert (attempts, type(error), classes) == (3, ConnectionRefusedError, [["transient"] * 3])
