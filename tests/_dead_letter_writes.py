"""A tool call that fails into a dead-letter store whose every write fails, on the async core and
on a ``SyncScheduler`` writing the letter inline (reviews R91b and R91c: such a write is counted as
``dead_letter_not_stored`` whatever it raised)."""

from __future__ import annotations

import asyncio
import contextlib

from opentelemetry.trace import Tracer

from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall
from agentgate.tasks._metrics import SchedulerMetrics


class FailingDeadLetters(DeadLetterStore):
    """A dead-letter store whose every write fails with ``error``."""

    def __init__(self, store: SQLiteStore, error: BaseException) -> None:
        super().__init__(store)
        self.error = error

    def record(self, letter: DeadLetter) -> None:
        raise self.error


def _failing_tool(attempt: Attempt) -> str:
    raise ValueError("bad input")


async def _failing_async_tool(attempt: Attempt) -> str:
    raise ValueError("bad input")


def _in_span(tracer: Tracer | None) -> contextlib.AbstractContextManager[object]:
    return tracer.start_as_current_span("call") if tracer is not None else contextlib.nullcontext()


def async_core(
    dead_letters: DeadLetterStore, tracer: Tracer | None = None
) -> tuple[SchedulerMetrics, BaseException]:
    """A failing call of tool ``t`` on the async core (in a span ``call`` of ``tracer``, where
    given): the scheduler's metrics and what the caller got."""
    scheduler = Scheduler(dead_letters=dead_letters)

    async def run() -> BaseException:
        try:
            with _in_span(tracer):
                await scheduler.submit(ToolCall("t", {}), _failing_async_tool)
        except BaseException as exc:
            return exc
        finally:
            await scheduler.aclose()
        raise AssertionError("the call did not fail")

    return scheduler.metrics, asyncio.run(run())


def sync_inline(
    dead_letters: DeadLetterStore, tracer: Tracer | None = None
) -> tuple[SchedulerMetrics, BaseException]:
    """The same call on a ``SyncScheduler`` without a store, which writes the letter inline."""
    with SyncScheduler(dead_letters=dead_letters) as sync:
        try:
            with _in_span(tracer):
                sync.submit(ToolCall("t", {}), _failing_tool)
        except BaseException as exc:
            return sync.scheduler.metrics, exc
    raise AssertionError("the call did not fail")
