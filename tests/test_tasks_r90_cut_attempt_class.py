"""Review R90: the attempt the async core cuts at its deadline was classed by the scheduler's
classifier, so one that calls every ``SchedulingError`` ``transient`` (a nested call refused with
``Overloaded`` never ran) classed the cut attempt's own ``DeadlineExceeded`` ``transient`` too,
and a tool not idempotent ran again after each cut, its effect maybe done each time. A cut attempt
is now a ``timeout`` whatever the classifier says, as the sync facade records a late transport
failure."""

from __future__ import annotations

import asyncio

import pytest

from agentgate.errors import DeadlineExceeded, SchedulingError
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Attempt,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    ToolCall,
    ToolLimits,
    by_type,
)

CLASSIFIER = by_type({SchedulingError: "transient"}) | DEFAULT_CLASSIFIER
RETRY = RetryPolicy(attempts=3, retry_on=("transient",), backoff_initial_s=0, backoff_max_s=0)
CONFIG = SchedulerConfig(tools={"pay": ToolLimits(timeout_s=0.02, idempotent=False, retry=RETRY)})


async def _cut_call() -> tuple[int, list[str]]:
    """Submit a call whose attempts are cut at the tool's timeout_s: how many ran, and the
    classes its dead letter records."""
    ran = 0

    async def pay(attempt: Attempt) -> None:
        nonlocal ran
        ran += 1  # the effect happens here, then the answer is slow
        await asyncio.sleep(10)

    scheduler = Scheduler(CONFIG, classifier=CLASSIFIER)
    try:
        with pytest.raises(DeadlineExceeded):
            await scheduler.submit(ToolCall("pay", {}), pay)
        [letter] = scheduler.dead_letters()
        return ran, [error.error_class for error in letter.errors]
    finally:
        await scheduler.aclose()


def test_an_attempt_cut_at_its_timeout_is_a_timeout_whatever_the_classifier_says() -> None:
    ran, classes = asyncio.run(_cut_call())
    assert classes == ["timeout"]
    assert ran == 1  # not idempotent: never run again after a cut


def test_the_classifier_still_classes_a_scheduling_error_the_tool_raised() -> None:
    async def main() -> list[str]:
        async def nested_refused(attempt: Attempt) -> None:
            raise SchedulingError("a nested call was refused")

        scheduler = Scheduler(CONFIG, classifier=CLASSIFIER)
        try:
            with pytest.raises(SchedulingError):
                await scheduler.submit(ToolCall("pay", {}), nested_refused)
            [letter] = scheduler.dead_letters()
            return [error.error_class for error in letter.errors]
        finally:
            await scheduler.aclose()

    assert asyncio.run(main()) == ["transient", "transient", "transient"]
