"""Calls cancelled, timed out or cut at each stage, against a real
loopback backend (``agentgate.sim``)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.backends import Timeouts
from agentgate.errors import BackendFailed, DeadlineExceeded, NoBackend, SchedulingError
from agentgate.sim import SimServer
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    ToolCall,
    ToolLimits,
)

MODEL = "llama-3.1-8b"


def _payload(tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens}


async def test_a_waiter_cancelled_in_the_loop_turn_its_slot_frees_is_not_sent() -> None:
    # The dispatcher waited for a freed slot with ``asyncio.wait_for``, which on Python 3.11
    # returns the event's result when the event is set and the waiting task cancelled before it
    # runs again: the cancellation was swallowed, the call routed, sent and answered, and its
    # caller (a gateway whose client left, an ``asyncio.timeout``) got an answer it had cancelled.
    with SimServer(time_scale=0.2) as server:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": server.url, "models": [MODEL], "max_concurrency": 1}]}
        )
        router = Router(inventory)
        async with Dispatcher(inventory, router) as dispatcher:
            holder = asyncio.create_task(dispatcher.chat(_payload(2000), slo_ttft_s=30.0))
            while router.in_flight("b0") == 0:
                await asyncio.sleep(0.01)
            waiter = asyncio.create_task(dispatcher.chat(_payload(2), slo_ttft_s=30.0, request_id="w"))
            while list(router._waiters) != ["w"] or server.served == 0:
                await asyncio.sleep(0.01)  # the waiter in line, the holder's request at the server
            holder.cancel()
            while router.in_flight("b0"):  # the holder's slot freed: the waiter's event is set
                await asyncio.sleep(0)
            waiter.cancel()  # in the same loop turn, before the waiter ran again
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert router.in_flight("b0") == 0 and not router._waiters and not router._queues
            assert server.served == 1  # the holder's request only: the waiter's was never sent


async def test_closing_the_dispatcher_ends_a_stream_in_flight_at_once() -> None:
    # ``aclose`` promises that calls in flight end with ``BackendFailed`` or ``NoBackend``. A stream
    # whose body was being read did not: aiohttp does not tell the reader of an answer that its
    # pool was closed, so the stream hung, silent, for ``idle_s`` (30 s by default) and only then
    # failed as a backend that went quiet.
    with SimServer(time_scale=0.2) as server:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]}
        )
        router = Router(inventory)
        dispatcher = Dispatcher(inventory, router, timeouts=Timeouts(idle_s=60.0))
        await dispatcher.start()
        received = asyncio.Event()

        async def consume() -> None:
            async for _ in dispatcher.stream(_payload(4000), slo_ttft_s=30.0):
                received.set()

        reader = asyncio.create_task(consume())
        await received.wait()
        await dispatcher.aclose()
        with pytest.raises(BackendFailed, match="broke after output") as failed:
            await asyncio.wait_for(reader, 10.0)  # not idle_s later
        assert "silent" not in str(failed.value)
        assert router.in_flight("b0") == 0 and not dispatcher.is_down("b0")


class _LongestBackoff(random.Random):
    """Jitter that always draws the longest wait."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_closing_the_async_scheduler_cuts_a_retry_backoff_short() -> None:
    # The sync facade's ``close`` cuts a backoff short and the retry gives up (``closed``); the
    # async ``aclose`` slept the backoff out (here a minute) and only then refused the retry.
    retry = RetryPolicy(attempts=3, backoff_initial_s=60.0, backoff_max_s=60.0)
    scheduler = Scheduler(SchedulerConfig(tools={"x": ToolLimits(retry=retry)}), rng=_LongestBackoff())
    attempts: list[int] = []

    async def refused(attempt: Attempt) -> None:
        attempts.append(attempt.number)
        raise ConnectionRefusedError("transient: retried after the backoff")

    call = asyncio.create_task(scheduler.submit(ToolCall("x"), refused))
    while not attempts:
        await asyncio.sleep(0.01)
    await asyncio.wait_for(scheduler.aclose(), 10.0)  # not the minute of the backoff
    with pytest.raises(SchedulingError, match="closed"):
        await call
    assert attempts == [1]
    assert [letter.reason for letter in scheduler.dead_letters()] == ["closed"]
    assert scheduler.in_flight == 0 and scheduler.queued == 0


async def test_cancelling_the_dispatcher_close_is_not_swallowed() -> None:
    # ``aclose`` awaited each cancelled loop task under ``suppress(CancelledError)``, which also
    # swallowed a cancellation of ``aclose`` itself (a shutdown under ``asyncio.timeout``): it
    # returned normally and its caller ran on as if nobody had cancelled it.
    with SimServer(time_scale=0.2) as server:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]}
        )
        dispatcher = Dispatcher(inventory, Router(inventory))
        await dispatcher.start()
        closing = asyncio.create_task(dispatcher.aclose())
        await asyncio.sleep(0)  # it waits for its cancelled health loop now
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        await dispatcher.aclose()  # a second close finishes the job
        with pytest.raises(NoBackend, match="closed"):
            await dispatcher.chat(_payload(2))


async def test_a_callers_own_deadline_does_not_open_the_breaker_for_everyone() -> None:
    # An attempt cut by the call's deadline (an agent's invocation with 10 ms left) counted as a
    # ``timeout`` of the tool: three such calls of one tenant opened the breaker of a tool that
    # answers in 50 ms, well within its own 5 s timeout, and every tenant got ``CircuitOpen`` for
    # 30 s. Cut by the caller, the attempt says no more about the tool than a cancellation does.
    config = SchedulerConfig(
        tools={"search": ToolLimits(timeout_s=5.0), "hung": ToolLimits(timeout_s=0.01)},
        breaker=BreakerPolicy(failure_threshold=3),
    )
    scheduler = Scheduler(config)

    async def tool(attempt: Attempt) -> str:
        await asyncio.sleep(0.05)
        return "ok"

    for _ in range(3):
        with pytest.raises(DeadlineExceeded, match="did not finish"):
            await scheduler.submit(ToolCall("search", tenant="hasty", deadline=time.time() + 0.01), tool)
    assert scheduler.breaker("tool:search").state is BreakerState.CLOSED
    assert await scheduler.submit(ToolCall("search", tenant="other"), tool) == "ok"
    assert [letter.tool for letter in scheduler.dead_letters()] == ["search"] * 3  # still recorded
    # The tool's own timeout, reached before the call's deadline, still counts.
    for _ in range(3):
        with pytest.raises(DeadlineExceeded):
            await scheduler.submit(ToolCall("hung", deadline=time.time() + 10.0), tool)
    assert scheduler.breaker("tool:hung").state is BreakerState.OPEN
    await scheduler.aclose()


def test_a_scheduler_retries_after_a_backoff_in_each_event_loop_it_serves() -> None:
    # The event that lets ``aclose`` cut a backoff short is bound to the loop it first waited in:
    # a scheduler kept across two ``asyncio.run`` (as a Gate keeps its own) failed its next
    # retry with "bound to a different event loop".
    retry = RetryPolicy(attempts=2, backoff_initial_s=0.01, backoff_max_s=0.01)
    scheduler = Scheduler(SchedulerConfig(tools={"x": ToolLimits(retry=retry)}))

    async def flaky(attempt: Attempt) -> str:
        if attempt.number == 1:
            raise ConnectionRefusedError("transient: retried after the backoff")
        return "ok"

    async def call() -> str:
        return await scheduler.submit(ToolCall("x"), flaky)

    assert [asyncio.run(call()) for _ in range(2)] == ["ok", "ok"]
