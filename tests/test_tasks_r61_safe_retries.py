"""Review R61: retries that are safe, in every failure path of the async core and the sync facade.

A tool not marked idempotent runs once per call whatever its policy lists; an idempotent one is
retried within its policy and its deadline, and no backoff sleeps past the deadline. Real
schedulers; the backoff's random source is fixed so that each delay is its bound.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from agentgate.errors import CircuitOpen, DeadlineExceeded
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

EVERY_CLASS = ("transient", "timeout", "connection", "error")
WAIT_S = 10.0  # bound on every wait: only a bug comes near it


class _Longest(random.Random):
    """Full jitter that always draws its bound: each backoff is as long as the policy allows."""

    def uniform(self, a: float, b: float) -> float:
        return b


def _config(limits: ToolLimits, breaker: BreakerPolicy | None = None) -> SchedulerConfig:
    return SchedulerConfig(tools={"t": limits}, breaker=breaker or BreakerPolicy())


def _keyed(deadline: float | None = None) -> ToolCall:
    return ToolCall("t", {"n": 1}, run_id="run", call_id="c1", deadline=deadline)


async def test_a_tool_not_idempotent_cut_by_its_timeout_after_it_started_runs_once() -> None:
    """Review R61: a tool that is neither idempotent nor takes a key, cut by its ``timeout_s``
    after it started, is not run again although ``retry_on`` lists every class: the call ends
    with ``DeadlineExceeded`` and a dead letter ``ambiguous_not_idempotent``."""
    retry = RetryPolicy(attempts=5, backoff_initial_s=0.0, retry_on=EVERY_CLASS)
    scheduler = Scheduler(_config(ToolLimits(timeout_s=0.05, retry=retry)))
    ran: list[int] = []

    async def pay(attempt: Attempt) -> None:
        ran.append(attempt.number)
        await asyncio.sleep(WAIT_S)

    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(_keyed(), pay)
    assert ran == [1]
    (letter,) = scheduler.dead_letters()
    assert letter.reason == "ambiguous_not_idempotent"
    assert scheduler.in_flight == 0
    await scheduler.aclose()


@pytest.mark.parametrize("error", [TimeoutError(), ConnectionResetError(), ValueError("500 after charge")])
def test_a_sync_tool_not_idempotent_that_fails_ambiguously_after_its_timeout_runs_once(
    error: Exception,
) -> None:
    """Review R61: under ``SyncScheduler`` a tool not idempotent that overruns its ``timeout_s``
    and then fails ambiguously (timeout, connection, error) is run once, with a key that does not
    reach it too (``key_reaches_tool=False``, as under a Gate) and ``takes_idempotency_key``."""
    retry = RetryPolicy(attempts=5, backoff_initial_s=0.0, retry_on=EVERY_CLASS)
    limits = ToolLimits(timeout_s=0.01, retry=retry, takes_idempotency_key=True)
    scheduler = SyncScheduler(_config(limits))
    ran: list[int] = []

    def pay(attempt: Attempt) -> None:
        ran.append(attempt.number)
        time.sleep(0.02)
        raise error

    call = ToolCall("t", {"n": 1}, run_id="run", call_id="c1", key_reaches_tool=False)
    with pytest.raises(type(error)):
        scheduler.submit(call, pay)
    assert ran == [1]
    assert [letter.reason for letter in scheduler.dead_letters()] == ["ambiguous_not_idempotent"]
    scheduler.close()


async def test_a_breaker_opening_mid_retry_stops_the_retries_without_running_the_tool() -> None:
    """Review R61: an idempotent tool retried on transient failures whose breaker opens after its
    second failure is not run a third time: the retry is refused with ``CircuitOpen`` and the
    call dead-lettered ``circuit_open`` with the two attempts it made."""
    retry = RetryPolicy(attempts=5, backoff_initial_s=0.0, retry_on=("transient",))
    breaker = BreakerPolicy(failure_threshold=2, reset_timeout_s=60)
    scheduler = Scheduler(_config(ToolLimits(idempotent=True, retry=retry), breaker))
    ran: list[int] = []

    async def down(attempt: Attempt) -> None:
        ran.append(attempt.number)
        raise ConnectionRefusedError

    with pytest.raises(CircuitOpen):
        await scheduler.submit(_keyed(), down)
    assert ran == [1, 2]
    (letter,) = scheduler.dead_letters()
    assert (letter.reason, len(letter.errors)) == ("circuit_open", 2)
    await scheduler.aclose()


def test_a_breaker_opened_by_another_caller_during_a_sync_backoff_stops_the_retry() -> None:
    """Review R61: a sync call backing off after a transient failure whose breaker another
    thread's failures open meanwhile is refused at its retry (``CircuitOpen``), its tool not run
    again."""
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.2, backoff_max_s=0.2, retry_on=("transient",))
    breaker = BreakerPolicy(failure_threshold=2, reset_timeout_s=60)
    scheduler = SyncScheduler(_config(ToolLimits(idempotent=True, retry=retry), breaker), rng=_Longest())
    ran: list[int] = []
    failed_once = threading.Event()

    def down(attempt: Attempt) -> None:
        ran.append(attempt.number)
        failed_once.set()
        raise ConnectionRefusedError

    def other(attempt: Attempt) -> None:
        raise ConnectionRefusedError

    outcome: list[BaseException] = []

    def caller() -> None:
        try:
            scheduler.submit(ToolCall("t"), down)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert failed_once.wait(WAIT_S)
    with pytest.raises(ConnectionRefusedError):  # the second failure in a row opens the breaker
        scheduler.submit(ToolCall("u", breaker_key="tool:t"), other)  # "u": one attempt
    thread.join(WAIT_S)
    assert ran == [1]
    assert isinstance(outcome[0], CircuitOpen)
    scheduler.close()


DEADLINE_S = 20.0


@pytest.mark.parametrize("sync", [False, True])
async def test_a_backoff_that_would_end_past_the_deadline_gives_up_at_once(sync: bool) -> None:
    """Review R61: an idempotent tool's retry whose backoff (here 30 s) would end past the
    call's deadline (20 s away) is given up when the attempt fails, not slept: the call ends
    well before its deadline, the tool run once, the dead letter's reason ``deadline``."""
    retry = RetryPolicy(attempts=5, backoff_initial_s=30.0, backoff_max_s=30.0, retry_on=("transient",))
    config = _config(ToolLimits(idempotent=True, retry=retry))
    ran: list[int] = []
    began = time.monotonic()
    if sync:
        scheduler = SyncScheduler(config, rng=_Longest())

        def down(attempt: Attempt) -> None:
            ran.append(attempt.number)
            raise ConnectionRefusedError

        with pytest.raises(ConnectionRefusedError):
            await asyncio.to_thread(scheduler.submit, _keyed(time.time() + DEADLINE_S), down)
        letters = scheduler.dead_letters()
        scheduler.close()
    else:
        core = Scheduler(config, rng=_Longest())

        async def adown(attempt: Attempt) -> None:
            ran.append(attempt.number)
            raise ConnectionRefusedError

        with pytest.raises(ConnectionRefusedError):
            await core.submit(_keyed(time.time() + DEADLINE_S), adown)
        letters = core.dead_letters()
        await core.aclose()
    # Half the deadline: a call that slept until it takes DEADLINE_S, and the other half is a
    # loaded machine's margin (a 2 s deadline with a 2 s bound left it none).
    assert time.monotonic() - began < DEADLINE_S / 2
    assert ran == [1]
    assert [letter.reason for letter in letters] == ["deadline"]


async def test_an_idempotent_tool_is_retried_within_its_policy_and_deadline() -> None:
    """Review R61: an idempotent tool failing with timeouts is run exactly ``attempts`` times
    when the backoffs fit in its deadline, each attempt with the same idempotency key."""
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.01, backoff_max_s=0.01, retry_on=("timeout",))
    scheduler = Scheduler(_config(ToolLimits(idempotent=True, retry=retry)), rng=_Longest())
    keys: list[str | None] = []

    async def slow(attempt: Attempt) -> None:
        keys.append(attempt.idempotency_key)
        raise TimeoutError

    with pytest.raises(TimeoutError):
        await scheduler.submit(_keyed(time.time() + WAIT_S), slow)
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0] is not None
    assert [letter.reason for letter in scheduler.dead_letters()] == ["attempts_exhausted"]
    await scheduler.aclose()


async def test_a_tool_cut_by_its_timeout_that_raises_a_transient_error_on_the_way_out_runs_once() -> None:
    """Review R61: a tool cut by its ``timeout_s`` that turns the cancellation into an error of
    its own on the way out (cleanup that raises ``ConnectionRefusedError``, ``transient``) was
    classified by that error and run again, although it had started and may have had its
    effect. An attempt its timeout cut is now a ``DeadlineExceeded`` (``timeout``, ambiguous):
    a tool not idempotent runs once."""
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.0, retry_on=("transient", "timeout"))
    scheduler = Scheduler(_config(ToolLimits(timeout_s=0.05, retry=retry)))
    ran: list[int] = []

    async def pay(attempt: Attempt) -> None:
        ran.append(attempt.number)
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            raise ConnectionRefusedError("cleanup: the connection was refused") from None

    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(_keyed(), pay)
    assert ran == [1]
    (letter,) = scheduler.dead_letters()
    assert (letter.reason, letter.errors[0].error_class) == ("ambiguous_not_idempotent", "timeout")
    await scheduler.aclose()


async def test_a_task_group_child_failing_in_a_tool_is_a_failed_attempt_not_a_cancellation() -> None:
    """Review R61: a tool whose ``TaskGroup`` child fails raises an ``ExceptionGroup``, a failed
    attempt retried by its policy, although on Python 3.11 the group leaves the task's
    ``cancelling()`` count raised: the caller was not cancelled, and must not get
    ``CancelledError`` (a first fix in this review, which read a raised count as the caller's
    cancellation, did that)."""
    retry = RetryPolicy(attempts=2, backoff_initial_s=0.0, retry_on=("error",))
    scheduler = Scheduler(_config(ToolLimits(idempotent=True, retry=retry)))
    ran: list[int] = []

    async def refused() -> None:
        raise ConnectionRefusedError

    async def tool(attempt: Attempt) -> None:
        ran.append(attempt.number)
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(WAIT_S))
            group.create_task(refused())

    with pytest.raises(ExceptionGroup):
        await scheduler.submit(ToolCall("t"), tool)
    assert ran == [1, 2]
    assert scheduler.in_flight == 0
    await scheduler.aclose()
