"""Review R87c: ``Scheduler.submit`` awaited what ``fn(attempt)`` returned when
``inspect.isawaitable`` said so, and took anything else as a plain function's value: an async
generator (an async generator function, none of its body run) was the call's result, where
``SyncScheduler`` refuses it. Now it is refused with ``InputError``, neither a failed attempt
nor a result.

Real components: ``Scheduler``s with and without a SQLite store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, Scheduler, ToolCall

ran: list[str] = []


async def _answers(_attempt: Attempt) -> AsyncIterator[str]:
    ran.append("body")
    yield "answer"


async def _ran(_attempt: Attempt) -> str:
    return "ran"


@pytest.mark.parametrize("with_store", [False, True], ids=["direct", "handed"])
def test_a_scheduler_refuses_an_async_generator_function_as_a_tool(tmp_path: Path, with_store: bool) -> None:
    store = SQLiteStore(tmp_path / "s.db") if with_store else None

    async def main() -> None:
        scheduler = Scheduler(store=store)
        try:
            with pytest.raises(InputError, match="tool t: a Scheduler called an async generator function"):
                await scheduler.submit(ToolCall("t"), _answers)
            assert await scheduler.submit(ToolCall("t"), _ran) == "ran"  # no slot kept
        finally:
            await scheduler.aclose()

    try:
        asyncio.run(main())
    finally:
        if store is not None:
            store.close()
    assert ran == []


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    ran.clear()
