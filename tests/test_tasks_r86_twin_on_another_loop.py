"""A keyed call whose running twin (the same idempotency key) runs on another event loop of the
same async ``Scheduler`` is refused with ``SchedulingError``, not asyncio's bare ``RuntimeError``
of a future attached to a different loop (review R86). The twin runs on for its own caller."""

from __future__ import annotations

import asyncio
import threading

from agentgate.errors import SchedulingError
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, ToolCall

WAIT_S = 5.0


def test_a_joiner_on_another_event_loop_is_refused_with_scheduling_error() -> None:
    scheduler = Scheduler(SchedulerConfig())
    started, joined = threading.Event(), threading.Event()
    outcomes: dict[str, object] = {}

    async def twin(_attempt: Attempt) -> str:
        started.set()
        await asyncio.to_thread(joined.wait, WAIT_S)
        return "twin's result"

    async def first() -> None:
        outcomes["first"] = await scheduler.submit(ToolCall("t", run_id="r", call_id="c"), twin)

    async def second() -> None:
        try:
            outcomes["second"] = await scheduler.submit(ToolCall("t", run_id="r", call_id="c"), twin)
        except BaseException as exc:  # what reached the joiner, whatever it is
            outcomes["second"] = exc
        finally:
            joined.set()

    def on_its_own_loop() -> None:
        started.wait(WAIT_S)
        asyncio.run(second())

    thread = threading.Thread(target=on_its_own_loop)
    thread.start()
    asyncio.run(first())
    thread.join(WAIT_S)
    refused = outcomes["second"]
    assert isinstance(refused, SchedulingError), refused
    assert "another event loop" in str(refused)
    assert outcomes["first"] == "twin's result"
