"""Review R91c: a dead letter the store fails to write is counted as ``dead_letter_not_stored``
whatever the error (docs/tasks.md). Since review R91b the write counts its own failure, but it
caught ``Exception`` only: a ``SystemExit`` or ``KeyboardInterrupt`` raised in the write (tallied
from the job's future before review R91b) was counted by neither the async scheduler nor a
``SyncScheduler`` writing the letter inline. It is now counted once, then raised to the caller as
before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall
from agentgate.tasks._metrics import SchedulerMetrics


class _InterruptedDeadLetters(DeadLetterStore):
    """A dead-letter store whose every write is interrupted with ``error``."""

    def __init__(self, store: SQLiteStore, error: BaseException) -> None:
        super().__init__(store)
        self.error = error

    def record(self, letter: DeadLetter) -> None:
        raise self.error


def _failing_tool(attempt: Attempt) -> str:
    raise ValueError("bad input")


async def _failing_async_tool(attempt: Attempt) -> str:
    raise ValueError("bad input")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


def _async_core(dead_letters: DeadLetterStore) -> tuple[SchedulerMetrics, BaseException]:
    scheduler = Scheduler(dead_letters=dead_letters)

    async def run() -> BaseException:
        try:
            await scheduler.submit(ToolCall("t", {}), _failing_async_tool)
        except BaseException as exc:
            return exc
        finally:
            await scheduler.aclose()
        raise AssertionError("the call did not fail")

    return scheduler.metrics, asyncio.run(run())


def _sync_inline(dead_letters: DeadLetterStore) -> tuple[SchedulerMetrics, BaseException]:
    with SyncScheduler(dead_letters=dead_letters) as sync:  # no store: the letter is written inline
        try:
            sync.submit(ToolCall("t", {}), _failing_tool)
        except BaseException as exc:
            return sync.scheduler.metrics, exc
    raise AssertionError("the call did not fail")


@pytest.mark.parametrize("path", [_async_core, _sync_inline], ids=["async", "sync"])
def test_a_dead_letter_write_ended_by_system_exit_is_counted_once_then_raised(
    store: SQLiteStore, path: Callable[[DeadLetterStore], tuple[SchedulerMetrics, BaseException]]
) -> None:
    metrics, raised = path(_InterruptedDeadLetters(store, SystemExit("a store driver exits")))
    assert type(raised) is SystemExit
    assert metrics.count("dead_letter_not_stored", "t") == 1


def test_a_dead_letter_write_ended_by_keyboard_interrupt_is_counted_once_then_raised(
    store: SQLiteStore,
) -> None:
    metrics, raised = _sync_inline(_InterruptedDeadLetters(store, KeyboardInterrupt()))
    assert type(raised) is KeyboardInterrupt
    assert metrics.count("dead_letter_not_stored", "t") == 1
