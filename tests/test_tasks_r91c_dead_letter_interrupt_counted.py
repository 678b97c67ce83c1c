"""Review R91c: a dead letter the store fails to write is counted as ``dead_letter_not_stored``
whatever the error (docs/tasks.md). Since review R91b the write counts its own failure, but it
caught ``Exception`` only: a ``SystemExit`` or ``KeyboardInterrupt`` raised in the write (tallied
from the job's future before review R91b) was counted by neither the async scheduler nor a
``SyncScheduler`` writing the letter inline. It is now counted once, then raised to the caller as
before."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _dead_letter_writes import FailingDeadLetters, async_core, sync_inline

from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks._metrics import SchedulerMetrics


@pytest.mark.parametrize("path", [async_core, sync_inline], ids=["async", "sync"])
def test_a_dead_letter_write_ended_by_system_exit_is_counted_once_then_raised(
    sqlite_store: SQLiteStore, path: Callable[[DeadLetterStore], tuple[SchedulerMetrics, BaseException]]
) -> None:
    metrics, raised = path(FailingDeadLetters(sqlite_store, SystemExit("a store driver exits")))
    assert type(raised) is SystemExit
    assert metrics.count("dead_letter_not_stored", "t") == 1


def test_a_dead_letter_write_ended_by_keyboard_interrupt_is_counted_once_then_raised(
    sqlite_store: SQLiteStore,
) -> None:
    metrics, raised = sync_inline(FailingDeadLetters(sqlite_store, KeyboardInterrupt()))
    assert type(raised) is KeyboardInterrupt
    assert metrics.count("dead_letter_not_stored", "t") == 1
