"""Review R89: a scheduler given both ``store=`` and ``dead_letters=`` dropped the
``DeadLetterStore`` it was given without a word: its dead letters went to the lease store, and a
deployment keeping leases on one store and dead letters on another found none where it looked.
They now go to the ``dead_letters`` given (the leases, rate buckets and breakers stay on
``store``), in the async core and the sync facade alike (docs/tasks.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SQLiteStore, SQLiteStore]]:
    leases, letters = SQLiteStore(tmp_path / "leases.db"), SQLiteStore(tmp_path / "letters.db")
    yield leases, letters
    leases.close()
    letters.close()


def _fails(attempt: Attempt) -> str:
    raise ValueError("bad input")


async def _fails_async(attempt: Attempt) -> str:
    raise ValueError("bad input")


def _where_letters_went(leases: SQLiteStore, given: DeadLetterStore) -> tuple[list[str], list[str]]:
    return [letter.tool for letter in given.recent()], [
        letter.tool for letter in DeadLetterStore(leases).recent()
    ]


def test_dead_letters_go_to_the_dead_letter_store_given_beside_a_store(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    leases, letters = stores
    given = DeadLetterStore(letters)

    async def main() -> None:
        scheduler = Scheduler(store=leases, dead_letters=given)
        try:
            with pytest.raises(ValueError, match="bad input"):
                await scheduler.submit(ToolCall("t", {}), _fails_async)
        finally:
            await scheduler.aclose()

    asyncio.run(main())
    assert _where_letters_went(leases, given) == (["t"], [])


def test_dead_letters_go_to_the_dead_letter_store_given_beside_a_store_in_threads(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    leases, letters = stores
    given = DeadLetterStore(letters)
    with (
        SyncScheduler(store=leases, dead_letters=given) as scheduler,
        pytest.raises(ValueError, match="bad input"),
    ):
        scheduler.submit(ToolCall("t", {}), _fails)
    assert _where_letters_went(leases, given) == (["t"], [])


def test_a_store_alone_still_keeps_the_dead_letters(stores: tuple[SQLiteStore, SQLiteStore]) -> None:
    leases, _ = stores
    with SyncScheduler(store=leases) as scheduler, pytest.raises(ValueError, match="bad input"):
        scheduler.submit(ToolCall("t", {}), _fails)
    assert [letter.tool for letter in DeadLetterStore(leases).recent()] == ["t"]
