"""Review R84: ``Scheduler`` and ``SyncScheduler`` checked ``config``, ``classifier`` and ``limits``
but not ``store``, ``dead_letters``, ``rng`` or ``registry``. ``store="path.db"`` and
``registry=1`` failed in the making with an ``AttributeError`` or ``TypeError``; ``rng=42`` and
``dead_letters=`` a ``Store`` were accepted, and the first retry or dead letter raised an
``AttributeError`` out of ``submit`` in place of the tool's error. Each is now an ``InputError``
naming the argument when the scheduler is made. Real schedulers on a real SQLite store."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import (
    Attempt,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

CONFIG = SchedulerConfig(default_tool=ToolLimits(retry=RetryPolicy(attempts=2, backoff_initial_s=0.001)))

Make = Callable[..., Any]


def _make_async(**arguments: Any) -> Scheduler:
    return Scheduler(CONFIG, **arguments)


def _make_sync(**arguments: Any) -> SyncScheduler:
    return SyncScheduler(CONFIG, **arguments)


SCHEDULERS = pytest.mark.parametrize("make", [_make_async, _make_sync], ids=["Scheduler", "SyncScheduler"])


def _wrong_arguments(sqlite_store: SQLiteStore, tmp_path: Path) -> list[tuple[str, object]]:
    return [
        ("rng", 42),
        ("rng", True),
        ("dead_letters", sqlite_store),
        ("store", str(tmp_path / "b.db")),
        ("store", DeadLetterStore(sqlite_store)),
        ("registry", 1),
    ]


@SCHEDULERS
def test_an_argument_of_another_kind_is_refused_when_the_scheduler_is_made(
    make: Make, sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    for name, value in _wrong_arguments(sqlite_store, tmp_path):
        with pytest.raises(InputError, match=rf"\b{name} must be a .*got {type(value).__name__}"):
            make(**{name: value})
    assert not (tmp_path / "b.db").exists()  # nothing was made from the path


def _refused(attempt: Attempt) -> str:
    raise ConnectionRefusedError("refused")


async def _refused_async(attempt: Attempt) -> str:
    raise ConnectionRefusedError("refused")


class _Shortest(random.Random):
    """Jitter at its least: each backoff is no wait at all."""

    def uniform(self, a: float, b: float) -> float:
        return a


def test_arguments_of_their_kinds_still_retry_and_dead_letter(sqlite_store: SQLiteStore) -> None:
    registry = CollectorRegistry()
    letters = DeadLetterStore(sqlite_store)
    with SyncScheduler(CONFIG, dead_letters=letters, rng=_Shortest(), registry=registry) as scheduler:
        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("sync"), _refused)
        assert scheduler.registry is registry

    async def main() -> None:
        scheduler = Scheduler(CONFIG, store=sqlite_store, rng=random.SystemRandom())
        try:
            with pytest.raises(ConnectionRefusedError):
                await scheduler.submit(ToolCall("async"), _refused_async)
        finally:
            await scheduler.aclose()

    asyncio.run(main())
    assert sorted(letter.tool for letter in letters.recent()) == ["async", "sync"]
    assert all(len(letter.errors) == 2 for letter in letters.recent())  # retried once, then given up
