"""Review R90b: R90 made every attempt the async core cuts at its deadline a ``timeout``, the
scheduler's classifier not asked, to stop a classifier's ``transient`` from running a tool not
idempotent again after a cut. That also threw away the classes a classifier gives a cut to keep
it out of ``trip_on`` (``error``, a class of its own), and the breaker of a slow tool opened. Only
a ``transient`` or ``connection`` class is now a ``timeout`` for a cut attempt, as it is for a sync
tool's late failure; ``error`` and custom classes are kept."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agentgate.errors import DeadlineExceeded
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Attempt,
    BreakerPolicy,
    RetryPolicy,
    Scheduler,
    ToolCall,
    ToolLimits,
    by_type,
)
from agentgate.tasks import SchedulerConfig as Config


async def _cut(cut_class: str, limits: ToolLimits, threshold: int = 1) -> tuple[int, list[str], list[str]]:
    """Submit one call of a tool whose first attempt hangs past its ``timeout_s`` and whose later
    ones succeed, with a classifier that calls ``DeadlineExceeded`` ``cut_class`` and a breaker
    that opens on ``threshold`` failures of a class ``timeout`` or ``transient``: how many
    attempts ran, the classes the dead letter records (none when the call succeeded), and the
    breakers' states."""
    ran = 0

    async def tool(attempt: Attempt) -> str:
        nonlocal ran
        ran += 1
        if ran == 1:
            await asyncio.sleep(10)
        return "ok"

    config = Config(
        tools={"t": limits},
        breaker=BreakerPolicy(failure_threshold=threshold, trip_on=("timeout", "transient")),
    )
    scheduler = Scheduler(config, classifier=by_type({DeadlineExceeded: cut_class}) | DEFAULT_CLASSIFIER)
    try:
        with contextlib.suppress(DeadlineExceeded):
            await scheduler.submit(ToolCall("t", {}), tool)
        classes = [error.error_class for letter in scheduler.dead_letters() for error in letter.errors]
        return ran, classes, [breaker.state.name for breaker in scheduler.breakers()]
    finally:
        await scheduler.aclose()


def _limits(idempotent: bool, retry_on: tuple[str, ...]) -> ToolLimits:
    retry = RetryPolicy(attempts=3, retry_on=retry_on, backoff_initial_s=0, backoff_max_s=0)
    return ToolLimits(timeout_s=0.02, idempotent=idempotent, retry=retry)


@pytest.mark.parametrize("cut_class", ["error", "slow"])
def test_a_cut_keeps_a_class_the_classifier_leaves_out_of_trip_on(cut_class: str) -> None:
    ran, classes, breakers = asyncio.run(_cut(cut_class, _limits(False, ("transient",))))
    assert (ran, classes) == (1, [cut_class])
    assert breakers == ["CLOSED"]


def test_a_tool_safe_to_repeat_is_retried_after_a_cut_of_a_class_its_retry_on_lists() -> None:
    ran, classes, _ = asyncio.run(_cut("slow", _limits(True, ("slow",)), threshold=5))
    assert (ran, classes) == (2, [])


def test_a_tool_not_safe_to_repeat_is_not_retried_after_a_cut_whatever_its_class() -> None:
    for cut_class in ("slow", "error", "transient", "connection"):
        ran, classes, _ = asyncio.run(_cut(cut_class, _limits(False, (cut_class,))))
        assert (ran, len(classes)) == (1, 1), cut_class


@pytest.mark.parametrize("cut_class", ["transient", "connection"])
def test_a_transport_class_for_a_cut_is_a_timeout(cut_class: str) -> None:
    ran, classes, breakers = asyncio.run(_cut(cut_class, _limits(True, ("transient", "connection"))))
    assert (ran, classes, breakers) == (1, ["timeout"], ["OPEN"])
    # Retried only where ``timeout`` is listed, as the default classifier's cut is.
    ran, classes, _ = asyncio.run(_cut(cut_class, _limits(True, ("timeout",)), threshold=5))
    assert (ran, classes) == (2, [])
