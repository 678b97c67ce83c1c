"""Scheduler promises found wanting by review: idempotency keys scoped to who calls, no key-based
repeat for a tool that never sees its key, twins, waiters of a closed loop, half-open probes, and
refusing what waits when the limits' owner closes. Real threads and event loops, no mocks."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentgate.errors import SchedulingError
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    ToolCall,
    ToolLimits,
    argument_digest,
    idempotency_key,
)

WAIT_S = 5.0


def _wait_until(predicate: object, what: str) -> None:
    assert callable(predicate)
    for _ in range(500):
        if predicate():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"timed out waiting until {what}")


# --- idempotency keys ------------------------------------------------------------------------------


def test_an_idempotency_key_names_one_callers_call_under_one_grant() -> None:
    base = ToolCall("orders", {"q": 1}, tenant="acme", principal="alice", run_id="1", call_id="call_0_0")
    key = base.idempotency_key()
    assert key is not None
    others = [
        ToolCall("orders", {"q": 1}, tenant="globex", principal="alice", run_id="1", call_id="call_0_0"),
        ToolCall("orders", {"q": 1}, tenant="acme", principal="bob", run_id="1", call_id="call_0_0"),
        ToolCall(
            "orders",
            {"q": 1},
            tenant="acme",
            principal="alice",
            run_id="1",
            call_id="call_0_0",
            authority_chain=("root", "sub-agent"),
        ),
        ToolCall("orders", {"q": 2}, tenant="acme", principal="alice", run_id="1", call_id="call_0_0"),
    ]
    assert len({key, *(o.idempotency_key() for o in others)}) == 1 + len(others)
    # The same caller under the same grant keeps its key across re-submissions.
    again = ToolCall("orders", {"q": 1}, tenant="acme", principal="alice", run_id="1", call_id="call_0_0")
    assert again.idempotency_key() == key
    chained = ToolCall(
        "orders",
        {"q": 1},
        tenant="acme",
        principal="alice",
        run_id="1",
        call_id="call_0_0",
        authority_chain=("root", "tip"),
    )
    assert chained.idempotency_key() == idempotency_key(
        "1", "orders", "call_0_0", argument_digest({"q": 1}), tenant="acme", principal="alice", grant="tip"
    )


async def test_a_completed_result_is_reused_only_for_the_same_callers_call() -> None:
    scheduler = Scheduler()
    ran: list[str] = []

    def tool(name: str):  # type: ignore[no-untyped-def]
        async def run(_attempt: Attempt) -> str:
            ran.append(name)
            return f"{name}'s orders"

        return run

    try:
        acme = ToolCall("orders", tenant="acme", principal="bot", run_id="1", call_id="call_0_0")
        globex = ToolCall("orders", tenant="globex", principal="bot", run_id="1", call_id="call_0_0")
        assert await scheduler.submit(acme, tool("acme")) == "acme's orders"
        assert await scheduler.submit(globex, tool("globex")) == "globex's orders"
        assert await scheduler.submit(acme, tool("acme again")) == "acme's orders"  # reused
        assert ran == ["acme", "globex"]
    finally:
        await scheduler.aclose()


def _timeout_retried(key_reaches_tool: bool) -> list[int]:
    config = SchedulerConfig(
        tools={
            "refund": ToolLimits(
                takes_idempotency_key=True,
                retry=RetryPolicy(
                    attempts=3, retry_on=("timeout",), backoff_initial_s=0.0, backoff_max_s=0.0
                ),
            )
        }
    )
    paid: list[int] = []

    def refund(_attempt: Attempt) -> str:
        paid.append(10)  # the effect happened, but the answer was lost
        raise TimeoutError("psp did not answer in time")

    call = ToolCall("refund", {"amount": 10}, run_id="r", call_id="c1", key_reaches_tool=key_reaches_tool)
    with SyncScheduler(config) as scheduler, pytest.raises(TimeoutError):
        scheduler.submit(call, refund)
    return paid


def test_a_keyed_tool_that_never_receives_its_key_is_not_repeated_after_a_timeout() -> None:
    assert _timeout_retried(key_reaches_tool=False) == [10]
    # The same tool that does receive the key deduplicates on it: it is repeated.
    assert _timeout_retried(key_reaches_tool=True) == [10, 10, 10]


# --- twins ---------------------------------------------------------------------------------------


async def test_a_call_joined_to_a_cancelled_twin_fails_with_a_scheduling_error() -> None:
    scheduler = Scheduler()
    release = asyncio.Event()

    async def slow(_attempt: Attempt) -> str:
        await release.wait()
        return "done"

    call = ToolCall("t", run_id="run", call_id="c1")
    first = asyncio.create_task(scheduler.submit(call, slow))
    await asyncio.sleep(0.02)
    joiner = asyncio.create_task(scheduler.submit(call, slow))
    await asyncio.sleep(0.02)
    first.cancel()
    done, _ = await asyncio.wait({joiner}, timeout=WAIT_S)
    try:
        assert joiner in done
        assert not joiner.cancelled()
        with pytest.raises(SchedulingError, match="twin"):
            joiner.result()
        assert first.cancelled()
    finally:
        release.set()
        await scheduler.aclose()


async def test_a_call_joined_to_an_interrupted_twin_fails_with_a_scheduling_error() -> None:
    """Kills: a twin whose tool raised SystemExit (or KeyboardInterrupt) handed that exception to
    the calls joined to it, raised in their own tasks (where an uncaught one stops the event
    loop), while a cancelled twin gives them ``SchedulingError``, as the sync facade does for
    both. Rule: the interrupt is the twin's caller's own; a joiner gets ``SchedulingError``."""
    scheduler = Scheduler()
    release = asyncio.Event()

    async def exits(_attempt: Attempt) -> str:
        await release.wait()
        raise SystemExit(3)

    call = ToolCall("t", run_id="run", call_id="c1")

    async def owner() -> str:
        try:
            return await scheduler.submit(call, exits)
        except SystemExit:
            return "exited"

    first = asyncio.create_task(owner())
    await asyncio.sleep(0.02)
    joiner = asyncio.create_task(scheduler.submit(call, exits))
    await asyncio.sleep(0.02)
    release.set()
    done, _ = await asyncio.wait({first, joiner}, timeout=WAIT_S)
    try:
        assert done == {first, joiner}
        assert first.result() == "exited"
        with pytest.raises(SchedulingError, match="twin"):
            joiner.result()
    finally:
        await scheduler.aclose()


# --- shared limits -------------------------------------------------------------------------------


def _hold_slot(sync: SyncScheduler) -> tuple[threading.Thread, threading.Event]:
    running, release = threading.Event(), threading.Event()

    def hold(_attempt: Attempt) -> str:
        running.set()
        assert release.wait(WAIT_S)
        return "held"

    holder = threading.Thread(target=lambda: sync.submit(ToolCall("t"), hold), daemon=True)
    holder.start()
    assert running.wait(WAIT_S)
    return holder, release


def test_a_waiter_of_a_closed_event_loop_takes_no_slot() -> None:
    limits = SharedLimits(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}))
    sync = SyncScheduler(limits=limits)
    holder, release = _hold_slot(sync)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    scheduler = Scheduler(limits=limits)

    async def quick(_attempt: Attempt) -> str:
        return "quick"

    try:
        asyncio.run_coroutine_threadsafe(scheduler.submit(ToolCall("t"), quick), loop)
        _wait_until(lambda: limits.queued == 1, "the async call queued")
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(WAIT_S)
        loop.close()  # its queued call can never run
        release.set()
        holder.join(WAIT_S)
        assert limits.in_flight == 0 and limits.queued == 0
        got = sync.submit(ToolCall("t", deadline=time.time() + 1.0), lambda _a: "next")
        assert got == "next"
    finally:
        sync.close()
        limits.close()


def test_refusing_the_waiting_calls_refuses_sync_async_and_later_calls() -> None:
    limits = SharedLimits(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}))
    sync = SyncScheduler(limits=limits)
    holder, release = _hold_slot(sync)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    scheduler = Scheduler(limits=limits)
    ran: list[str] = []

    async def queued_async(_attempt: Attempt) -> str:
        ran.append("async")
        return "async"

    sync_error: list[BaseException] = []

    def queued_sync() -> None:
        try:
            sync.submit(ToolCall("t"), lambda _a: ran.append("sync"))
        except SchedulingError as exc:
            sync_error.append(exc)

    try:
        pending = asyncio.run_coroutine_threadsafe(scheduler.submit(ToolCall("t"), queued_async), loop)
        waiter = threading.Thread(target=queued_sync, daemon=True)
        waiter.start()
        _wait_until(lambda: limits.queued == 2, "both calls queued")
        assert limits.refuse_waiting("closing") == 2
        with pytest.raises(SchedulingError, match="closing"):
            pending.result(WAIT_S)
        waiter.join(WAIT_S)
        assert len(sync_error) == 1
        with pytest.raises(SchedulingError, match="closing"):  # a later call does not start either
            sync.submit(ToolCall("t"), lambda _a: ran.append("later"))
        release.set()
        holder.join(WAIT_S)
        assert ran == [] and limits.in_flight == 0 and limits.queued == 0
    finally:
        release.set()
        asyncio.run_coroutine_threadsafe(scheduler.aclose(), loop).result(WAIT_S)
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(WAIT_S)
        loop.close()
        sync.close()
        limits.close()


# --- breakers ------------------------------------------------------------------------------------


def _half_open(max_calls: int = 1) -> tuple[CircuitBreaker, list[float]]:
    now = [0.0]
    breaker = CircuitBreaker(
        "tool:t",
        BreakerPolicy(failure_threshold=1, reset_timeout_s=10.0, half_open_max_calls=max_calls),
        clock=lambda: now[0],
    )
    return breaker, now


def test_a_half_open_breaker_admits_no_more_probes_than_its_policy() -> None:
    breaker, now = _half_open()
    assert breaker.admit() is False  # call A starts while CLOSED: it holds no probe
    assert breaker.allow()  # call B
    breaker.record_failure("transient")  # B fails: OPEN
    now[0] = 11.0
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.admit() is True  # call C: the one probe
    breaker.record_failure("error")  # A ends with a bad argument: it gave back no probe of its own
    assert not breaker.allow()
    breaker.record_failure("error", probe=True)  # C's bad argument says nothing: its probe is back
    assert breaker.admit() is True


def test_a_probe_that_fails_outside_trip_on_frees_its_probe_in_the_scheduler() -> None:
    config = SchedulerConfig(
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=0.05, half_open_max_calls=1)
    )

    def fails(error: BaseException):  # type: ignore[no-untyped-def]
        def run(_attempt: Attempt) -> str:
            raise error

        return run

    with SyncScheduler(config) as scheduler:
        with pytest.raises(ConnectionRefusedError):  # transient: trips the breaker
            scheduler.submit(ToolCall("t"), fails(ConnectionRefusedError()))
        assert scheduler.scheduler.breaker("tool:t").state is BreakerState.OPEN
        threading.Event().wait(0.06)
        with pytest.raises(ValueError):  # the probe: a bad argument, nothing about the tool
            scheduler.submit(ToolCall("t"), fails(ValueError("bad")))
        assert scheduler.submit(ToolCall("t"), lambda _a: "ok") == "ok"  # the next probe runs
        assert scheduler.scheduler.breaker("tool:t").state is BreakerState.CLOSED
