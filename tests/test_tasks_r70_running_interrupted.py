"""Review R70: the sync facade marked the running attempt (``RUNNING``, which makes the calls a
tool makes nested ones) with ``token = RUNNING.set(...)`` on the line *before* its ``try``, so a
Ctrl-C delivered as ``set`` returned (CPython checks for signals when a call returns) escaped
with the mark left in the caller's context: every later call from that thread was taken for a
nested call of a finished attempt and borrowed its ancestor's slot, past the tool's limit.

The interrupt is delivered deterministically: an opcode tracer raises ``KeyboardInterrupt`` in
the facade's frame at the first instruction after the mark is set, as the signal handler would.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from agentgate.store import SQLiteStore
from agentgate.tasks import (
    Attempt,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
    _scheduler,
    _sync,
)
from agentgate.tasks._waiter import RUNNING

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] == (3, 12),
    reason="CPython 3.12 misses opcode events of sys.settrace (python/cpython#114480, seen on "
    "3.12.1): the tracer cannot land the interrupt; 3.11 (CI) and 3.13 run these tests",
)


def _interrupt_once_marked() -> Callable[..., Any]:
    """A tracer raising ``KeyboardInterrupt`` in ``_sync``'s and ``_scheduler``'s frames at the first instruction that
    runs while ``RUNNING`` names an attempt, before the tool is called."""
    fired = False

    def on_opcode(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal fired
        # From CPython 3.12 a frame's opcode events start only when asked for at a line event:
        # asking at its call event alone (enough on 3.11) is ignored (review R77).
        frame.f_trace_opcodes = True
        if event == "opcode" and not fired and RUNNING.get() is not None:
            fired = True
            raise KeyboardInterrupt
        return on_opcode

    def on_call(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename not in (_sync.__file__, _scheduler.__file__):
            return None
        frame.f_trace_opcodes = True
        return on_opcode

    return on_call


def _tool(attempt: Attempt) -> str:
    return "ran"


@pytest.mark.parametrize("handed", [False, True], ids=["direct", "handed"])
def test_ctrl_c_as_the_attempt_is_marked_leaves_no_mark(handed: bool, tmp_path: Path) -> None:
    """Review R70: a Ctrl-C landing as the facade marks the running attempt left the mark in the
    caller's context (the direct mode's ``running = RUNNING.set(waiter)`` and the handed mode's
    ``token = RUNNING.set(running)`` stood before their ``try``); the next call then ran as a
    nested one. The mark must be gone however the attempt is left."""
    contextvars.Context().run(_interrupt_then_call, handed, tmp_path)  # a failure leaks no mark


def _interrupt_then_call(handed: bool, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "agentgate.db") if handed else None
    config = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})
    try:
        with SyncScheduler(config, store=store) as scheduler:
            sys.settrace(_interrupt_once_marked())
            try:
                with pytest.raises(KeyboardInterrupt):
                    scheduler.submit(ToolCall(tool="t"), _tool)
            finally:
                sys.settrace(None)
            assert RUNNING.get() is None
            assert scheduler.submit(ToolCall(tool="t"), _tool) == "ran"
    finally:
        if store is not None:
            store.close()


def test_ctrl_c_as_the_async_core_marks_the_attempt_leaves_no_mark() -> None:
    """Review R70: the async core's ``RUNNING.set(waiter)`` stood before its ``try`` too; the
    attempt runs in the caller's task, whose later calls a mark left behind made nested."""
    contextvars.Context().run(asyncio.run, _interrupt_then_call_async())


async def _interrupt_then_call_async() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(concurrency=1)}))
    try:
        sys.settrace(_interrupt_once_marked())
        try:
            with pytest.raises(KeyboardInterrupt):
                await scheduler.submit(ToolCall(tool="t"), _tool)
        finally:
            sys.settrace(None)
        assert RUNNING.get() is None
        assert await scheduler.submit(ToolCall(tool="t"), _tool) == "ran"
    finally:
        await scheduler.aclose()
