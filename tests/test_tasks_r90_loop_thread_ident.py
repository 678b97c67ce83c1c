"""Review R90: a ``SyncScheduler`` told its own loop thread by the thread's ident, kept after the
thread ended. CPython gives an ended thread's ident to a thread started later (here, the next
one), so after ``close`` that thread's ``submit`` was refused as "called from the scheduler's own
thread" instead of "the scheduler is closed", and its second ``close`` raised where the docs say
it returns. The ident now counts only while the loop thread lives; on the loop thread itself both
are still refused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from agentgate.errors import SchedulingError
from agentgate.tasks import Attempt, SchedulerConfig, SyncScheduler, ToolCall


def _ran(attempt: Attempt) -> str:
    return "ran"


def _outcome(action: Callable[[], object]) -> str:
    try:
        return repr(action())
    except SchedulingError as exc:
        return str(exc)


def test_a_thread_given_the_ended_loop_thread_s_ident_is_not_taken_for_it() -> None:
    scheduler = SyncScheduler(SchedulerConfig())
    loop_ident = scheduler._thread.ident
    scheduler.close()
    told: dict[str, str] = {}

    def later_thread() -> None:
        if threading.get_ident() == loop_ident:
            told["submit"] = _outcome(lambda: scheduler.submit(ToolCall("t", {}), _ran))
            told["close"] = _outcome(scheduler.close)

    for _ in range(100):
        thread = threading.Thread(target=later_thread)
        thread.start()
        thread.join()
        if told:
            break
    else:
        pytest.skip("no later thread was given the ended loop thread's ident")
    assert told == {"submit": "the scheduler is closed", "close": "None"}


def test_the_live_loop_thread_is_still_refused() -> None:
    with SyncScheduler(SchedulerConfig()) as scheduler:

        def on_the_loop() -> list[str]:
            return [
                _outcome(lambda: scheduler.submit(ToolCall("t", {}), _ran)),
                _outcome(lambda: scheduler.close(drain=False)),
            ]

        async def ask() -> list[str]:
            return on_the_loop()

        told = asyncio.run_coroutine_threadsafe(ask(), scheduler._loop).result(timeout=5)
    assert told == [
        "SyncScheduler.submit must not be called from the scheduler's own thread",
        "SyncScheduler.close must not be called from the scheduler's own thread",
    ]
