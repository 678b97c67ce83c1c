"""Review R88: ``PriorityClass`` checked its ``rank`` only for >= 0, and a call of a class ranked
past 4,300 digits that had to wait raised a bare ``ValueError`` out of ``Scheduler.submit`` (the
fair queue names a rank's node by its number). A rank is now at most 2**63 - 1, refused with
``InputError`` naming the class when it is made.

Real components: ``PriorityClass``, ``SchedulerConfig`` and a ``Scheduler``."""

from __future__ import annotations

import asyncio

import pytest

from agentgate.errors import InputError
from agentgate.tasks import Attempt, PriorityClass, Scheduler, SchedulerConfig, ToolCall


@pytest.mark.parametrize("rank", [2**63, 10**5000], ids=["past-int64", "past-4300-digits"])
def test_a_rank_past_the_largest_stored_integer_is_refused(rank: int) -> None:
    with pytest.raises(InputError, match=r"priority class 'bulk': rank must be <= 9223372036854775807, got "):
        PriorityClass("bulk", rank)


def test_a_waiting_call_of_the_largest_rank_is_served() -> None:
    config = SchedulerConfig(
        max_concurrency=1,
        priority_classes=(PriorityClass("urgent", 0), PriorityClass("bulk", 2**63 - 1)),
        default_priority="urgent",
    )

    async def main() -> list[str]:
        scheduler = Scheduler(config)
        try:
            release = asyncio.Event()

            async def held(_attempt: Attempt) -> str:
                await release.wait()
                return "first"

            async def ran(_attempt: Attempt) -> str:
                return "bulk"

            first = asyncio.ensure_future(scheduler.submit(ToolCall("t"), held))
            await asyncio.sleep(0)
            queued = asyncio.ensure_future(scheduler.submit(ToolCall("t", priority="bulk"), ran))
            await asyncio.sleep(0)
            assert scheduler.queued == 1
            release.set()
            return [await first, await queued]
        finally:
            await scheduler.aclose()

    assert asyncio.run(main()) == ["first", "bulk"]
