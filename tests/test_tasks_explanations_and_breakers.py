"""The task scheduler and the Gate's explanations: real event loops, no mocks.

- ``Authorization.explain()`` of an allowed call read "agentgate refused ... allowed by ...";
- a queued call whose slot was given back only after its deadline (the event loop was busy past
  it, so the grant came before the queue's timer could refuse the call) started its tool anyway:
  a preemptible attempt ran up to its first ``await``, a ``preemptible=False`` one (a sync tool
  under ``Gate.arun``) ran to its end, although a call "never starts after its deadline";
- the success of a slow call admitted before its breaker opened closed the OPEN breaker at once
  (no reset timeout) and a HALF_OPEN one beside its probe, where only a probe success closes it.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentgate.capabilities import Call
from agentgate.errors import CircuitOpen, DeadlineExceeded
from agentgate.gate import Authorization
from agentgate.gate._authorization import Verdict
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

WAIT_S = 5.0

# --- Authorization.explain ----------------------------------------------------------------------


def test_an_allowed_call_is_explained_as_allowed_not_refused() -> None:
    reason = "allowed by role worker rule 1: tool:lookup (line 24)"
    auth = Authorization(Verdict.ALLOW, Call.tool("lookup", {"id": "42"}), None, reasons=(reason,))
    text = auth.explain()
    assert text.startswith("agentgate allowed tool:lookup (invoke)") and reason in text
    assert "refused" not in text and "Do not retry" not in text


def test_a_denied_call_is_still_explained_as_refused_with_advice() -> None:
    auth = Authorization(Verdict.DENY, Call.tool("lookup", {"id": "42"}), None, reasons=("no rule",))
    assert auth.explain() == (
        "agentgate refused tool:lookup (invoke): no rule. Do not retry this call; choose another way or stop."
    )


# --- a slot granted after the queued call's deadline --------------------------------------------


@pytest.mark.parametrize("preemptible", [True, False])
async def test_a_call_granted_its_slot_after_its_deadline_never_starts(preemptible: bool) -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"x": ToolLimits(concurrency=1)}))
    release = asyncio.Event()
    deadline = time.time() + 0.3
    ran: list[int] = []

    async def hold(attempt: Attempt) -> None:
        await release.wait()
        while time.time() < deadline + 0.05:  # the loop is busy past the waiter's deadline, then
            time.sleep(0.01)  # this attempt gives its slot back, granting it to the waiter at once

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)  # what runs before the first await is the tool's effect too
        await asyncio.sleep(0)
        return "ran"

    holder = asyncio.create_task(scheduler.submit(ToolCall("x"), hold))
    await asyncio.sleep(0)
    late = asyncio.create_task(
        scheduler.submit(ToolCall("x", deadline=deadline), tool, preemptible=preemptible)
    )
    await asyncio.sleep(0)
    assert scheduler.queued == 1  # it waits for the held slot
    release.set()
    await holder
    with pytest.raises(DeadlineExceeded, match="could not start before the call's deadline") as caught:
        await late
    assert ran == []
    assert caught.value.waited_s is not None and caught.value.tool == "x"
    assert scheduler.in_flight == 0 and scheduler.queued == 0  # the late grant was given back

    async def quick(attempt: Attempt) -> str:
        return "ok"

    assert await scheduler.submit(ToolCall("x"), quick) == "ok"
    await scheduler.aclose()


# --- the success of a call admitted before its breaker opened -----------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_success_of_a_call_that_holds_no_probe_leaves_the_open_breaker_to_its_timeout() -> None:
    clock = Clock()
    breaker = CircuitBreaker("tool:x", BreakerPolicy(failure_threshold=1, reset_timeout_s=10), clock=clock)
    assert breaker.admit() is False  # admitted while CLOSED: holds no probe
    breaker.record_failure("transient", probe=False)
    assert breaker.state is BreakerState.OPEN
    breaker.record_success(probe=False)  # a call admitted before the breaker opened
    assert breaker.state is BreakerState.OPEN and breaker.admit() is None
    clock.now += 10
    assert breaker.admit() is True  # the probe
    breaker.record_success(probe=False)  # another late call: the probe decides
    assert breaker.state is BreakerState.HALF_OPEN and breaker.admit() is None
    breaker.record_success(probe=True)
    assert breaker.state is BreakerState.CLOSED


def test_a_success_while_closed_still_resets_the_failure_count() -> None:
    breaker = CircuitBreaker("tool:x", BreakerPolicy(failure_threshold=2))
    breaker.record_failure("transient", probe=False)
    breaker.record_success(probe=False)
    breaker.record_failure("transient", probe=False)
    assert breaker.state is BreakerState.CLOSED


ONE_FAILURE_OPENS = SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=60))


async def test_a_slow_call_that_succeeds_after_its_breaker_opened_does_not_close_it() -> None:
    scheduler = Scheduler(ONE_FAILURE_OPENS)
    go = asyncio.Event()
    ran: list[str] = []

    async def slow(attempt: Attempt) -> str:
        await go.wait()
        return "ok"

    async def down(attempt: Attempt) -> str:
        raise ConnectionRefusedError("down")

    async def other(attempt: Attempt) -> str:
        ran.append("other")
        return "ran"

    started = asyncio.create_task(scheduler.submit(ToolCall("t"), slow))
    await asyncio.sleep(0)
    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("t"), down)
    go.set()
    assert await started == "ok"
    assert scheduler.breaker("tool:t").state is BreakerState.OPEN
    with pytest.raises(CircuitOpen):
        await scheduler.submit(ToolCall("t"), other)
    assert ran == []
    await scheduler.aclose()


def test_a_slow_sync_call_that_succeeds_after_its_breaker_opened_does_not_close_it() -> None:
    with SyncScheduler(ONE_FAILURE_OPENS) as sync:
        entered, go = threading.Event(), threading.Event()
        results: list[str] = []

        def slow(attempt: Attempt) -> str:
            entered.set()
            go.wait(WAIT_S)
            return "ok"

        def down(attempt: Attempt) -> str:
            raise ConnectionRefusedError("down")

        worker = threading.Thread(target=lambda: results.append(sync.submit(ToolCall("t"), slow)))
        worker.start()
        assert entered.wait(WAIT_S)
        with pytest.raises(ConnectionRefusedError):
            sync.submit(ToolCall("t"), down)
        go.set()
        worker.join(WAIT_S)
        assert results == ["ok"]
        assert sync.scheduler.breaker("tool:t").state is BreakerState.OPEN
        with pytest.raises(CircuitOpen):
            sync.submit(ToolCall("t"), lambda _a: "never")
