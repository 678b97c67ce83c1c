"""Review R62: the error of a call given up names what its last attempt failed with.

A call that fails and is then refused by the scheduler (its breaker opened, its scheduler closed
during the backoff, its attempt cut by the deadline) ends with the scheduler's error; that error
keeps the tool's last error as its ``__cause__`` and names it (class, and its first line where
the call keeps error text) in its message. A tool's own error that is the call's outcome keeps
what the tool chained to it. Real schedulers, async and sync.
"""

from __future__ import annotations

import asyncio

import pytest

from agentgate.errors import CircuitOpen, DeadlineExceeded, SchedulingError
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

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
SECRET = "iban=DE89370400440532013000"


def _opening_config() -> SchedulerConfig:
    """A retried idempotent tool whose breaker opens at its first failure: the retry is refused."""
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.0, retry_on=("transient", "connection"))
    return SchedulerConfig(
        tools={"t": ToolLimits(idempotent=True, retry=retry)},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=WAIT_S),
    )


async def test_a_retry_refused_by_the_breaker_carries_the_tools_last_error() -> None:
    """Review R62: a call whose first attempt failed and whose retry the opened breaker refused
    ended with ``CircuitOpen`` and no cause (``raise ... from None``): the user saw no trace of
    the tool's failure. Its cause is now the tool's error, and its message names it."""
    scheduler = Scheduler(_opening_config())
    refused = ConnectionRefusedError("port 5432 refused")

    async def tool(attempt: Attempt) -> None:
        raise refused

    with pytest.raises(CircuitOpen) as caught:
        await scheduler.submit(ToolCall("t"), tool)
    assert caught.value.__cause__ is refused
    assert "attempt 1 failed with ConnectionRefusedError: port 5432 refused" in str(caught.value)
    (letter,) = scheduler.dead_letters()
    assert (letter.reason, letter.errors[-1].error_type) == ("circuit_open", "ConnectionRefusedError")
    await scheduler.aclose()


async def test_the_message_names_the_class_only_when_the_call_keeps_no_error_text() -> None:
    """Review R62: a call that keeps no error text (as ``Gate.run`` calls are, whose tools' errors
    may quote their arguments) names its last error by class only: the text stays out of the
    scheduler's message (it is still the ``__cause__``, in process)."""
    scheduler = Scheduler(_opening_config())

    async def tool(attempt: Attempt) -> None:
        raise ConnectionRefusedError(f"refused for {SECRET}")

    with pytest.raises(CircuitOpen) as caught:
        await scheduler.submit(ToolCall("t", keep_error_text=False), tool)
    assert "attempt 1 failed with ConnectionRefusedError" in str(caught.value)
    assert SECRET not in str(caught.value)
    await scheduler.aclose()


async def test_a_retry_refused_at_close_carries_the_tools_last_error() -> None:
    """Review R62: a call whose scheduler closed while its retry backed off ended with
    ``SchedulingError`` (closed) and no cause; its cause is now the tool's last error."""
    retry = RetryPolicy(attempts=3, backoff_initial_s=WAIT_S, backoff_max_s=WAIT_S, retry_on=("transient",))
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(idempotent=True, retry=retry)}))
    failed = asyncio.Event()
    refused = ConnectionRefusedError("no route")

    async def tool(attempt: Attempt) -> None:
        failed.set()
        raise refused

    call = asyncio.ensure_future(scheduler.submit(ToolCall("t"), tool))
    await asyncio.wait_for(failed.wait(), WAIT_S)
    await scheduler.aclose(timeout_s=WAIT_S)
    with pytest.raises(SchedulingError) as caught:
        await call
    assert caught.value.__cause__ is refused
    assert "attempt 1 failed with ConnectionRefusedError: no route" in str(caught.value)


async def test_a_cut_attempt_keeps_what_the_tool_raised_on_the_way_out() -> None:
    """Review R62: an attempt cut by its timeout whose tool raised an error of its own on the way
    out ended with ``DeadlineExceeded`` whose cause ``from None`` had erased; the cause is now
    the tool's error, named in the message."""
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(timeout_s=0.05)}))

    async def tool(attempt: Attempt) -> None:
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            raise ConnectionResetError("cleanup failed") from None

    with pytest.raises(DeadlineExceeded) as caught:
        await scheduler.submit(ToolCall("t"), tool)
    assert isinstance(caught.value.__cause__, ConnectionResetError)
    assert "ConnectionResetError: cleanup failed" in str(caught.value)
    await scheduler.aclose()


async def test_a_tools_own_error_keeps_what_the_tool_chained_to_it() -> None:
    """Review R62: the tool's own error, given up by the retry rule, was raised ``from None``: the
    cause the tool gave it (``raise ValueError from KeyError``) was erased and its context
    replaced by the scheduler's internal give-up. Both are now the tool's."""
    scheduler = Scheduler(SchedulerConfig())
    missing = KeyError("account")

    async def tool(attempt: Attempt) -> None:
        try:
            {}["account"]
        except KeyError:
            raise ValueError("no account") from missing

    with pytest.raises(ValueError) as caught:
        await scheduler.submit(ToolCall("t"), tool)
    assert caught.value.__cause__ is missing
    assert isinstance(caught.value.__context__, KeyError)
    await scheduler.aclose()


def test_the_sync_facade_names_the_tools_last_error_too() -> None:
    """Review R62: the sync facade gave up as the async core did (``raise ... from None``): its
    ``CircuitOpen`` now carries the tool's last error too, and a tool's own error keeps its cause."""
    sync = SyncScheduler(_opening_config())
    refused = ConnectionRefusedError("port 5432 refused")
    missing = KeyError("account")

    def failing(attempt: Attempt) -> None:
        raise refused

    def chained(attempt: Attempt) -> None:
        raise ValueError("no account") from missing

    try:
        with pytest.raises(CircuitOpen) as caught:
            sync.submit(ToolCall("t"), failing)
        assert caught.value.__cause__ is refused
        assert "attempt 1 failed with ConnectionRefusedError: port 5432 refused" in str(caught.value)
        with pytest.raises(ValueError) as own:
            sync.submit(ToolCall("u"), chained)
        assert own.value.__cause__ is missing
    finally:
        sync.close()
