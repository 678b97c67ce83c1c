"""Review R89b: R89 made every failure that came after a tool's ``timeout_s`` a ``timeout``,
``error`` included, so a slow tool's bad arguments (a ``ValueError`` it reported, which its caller
gets) counted toward opening its breaker, and a few of one agent's bad calls refused every other
caller's good ones, where docs/tasks.md says failures of class ``error`` never count. Only a late
failure of the tool's transport (``transient``, ``connection``) is now a ``timeout``; one the tool
came to itself (``error``, a custom class) keeps its class, in the sync scheduler and in the
async one for work it does not cut."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from agentgate.store.dead_letters import DeadLetter
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    Scheduler,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

TIMEOUT_S = 0.01
CONFIG = SchedulerConfig(
    tools={"slow": ToolLimits(timeout_s=TIMEOUT_S)},
    breaker=BreakerPolicy(failure_threshold=2),
)
MODES = pytest.mark.parametrize("mode", ["sync", "async-not-preemptible"])


class QuotaSpent(Exception):
    error_class = "quota"  # a custom class, read by the default classifier


def _late(error: Exception) -> Callable[[Attempt], None]:
    def tool(attempt: Attempt) -> None:
        time.sleep(TIMEOUT_S * 3)  # past timeout_s, which nothing cuts here
        raise error

    return tool


def _run(mode: str, error: Exception) -> tuple[list[list[str]], str]:
    """Two late failures of ``tool`` with ``error``, then a good call: each dead letter's error
    classes, and what the good call got."""
    if mode == "sync":
        with SyncScheduler(CONFIG) as scheduler:
            for _ in range(2):
                with pytest.raises(type(error)):
                    scheduler.submit(ToolCall("slow", {}), _late(error))
            try:
                got: str = scheduler.submit(ToolCall("slow", {}), lambda attempt: "ok")
            except Exception as exc:
                got = type(exc).__name__
            letters = scheduler.dead_letters()
    else:

        async def main() -> tuple[list[DeadLetter], str]:
            scheduler = Scheduler(CONFIG)
            try:
                for _ in range(2):
                    with pytest.raises(type(error)):
                        await scheduler.submit(
                            ToolCall("slow", {}),
                            lambda attempt: asyncio.to_thread(_late(error), attempt),
                            preemptible=False,
                        )

                async def good(attempt: Attempt) -> str:
                    return "ok"

                try:
                    result: str = await scheduler.submit(ToolCall("slow", {}), good)
                except Exception as exc:
                    result = type(exc).__name__
            finally:
                await scheduler.aclose()
            return list(scheduler.dead_letters()), result

        letters, got = asyncio.run(main())
    return [[e.error_class for e in letter.errors] for letter in letters], got


@MODES
def test_a_bad_argument_reported_late_stays_an_error_and_does_not_open_the_breaker(mode: str) -> None:
    classes, got = _run(mode, ValueError("amount must be positive"))
    assert classes == [["error"], ["error"]]
    assert got == "ok", "a slow tool's bad arguments opened its breaker for every caller"


@MODES
def test_a_custom_class_reported_late_keeps_its_class(mode: str) -> None:
    classes, got = _run(mode, QuotaSpent("quota spent"))
    assert (classes, got) == ([["quota"], ["quota"]], "ok")


@MODES
def test_a_lost_connection_reported_late_is_still_a_timeout(mode: str) -> None:
    classes, got = _run(mode, ConnectionResetError("reset"))
    assert (classes, got) == ([["timeout"], ["timeout"]], "CircuitOpen")
