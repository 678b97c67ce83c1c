"""Review R58: a nested call's rate token, when the loop of the call it was taken for is closed.

Real schedulers sharing one ``SharedLimits``, a real event loop and the real rate timer thread.
"""

from __future__ import annotations

import asyncio
import time

from agentgate.tasks import (
    Attempt,
    RateLimit,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    ToolCall,
    ToolLimits,
)

WAIT_S = 10.0  # bound on every wait: only a bug comes near it
RATE = 2.0  # tokens per second of tool "b": its timer gives the nested call one in 0.5 s


async def _ok(attempt: Attempt) -> str:
    return "ok"


def test_a_nested_call_whose_loop_closed_gives_its_rate_token_back() -> None:
    """Review R58: the rate token taken to start a queued nested call whose loop had closed was
    kept: the call never ran, and its tool had one token less than its rate allows."""
    limits_b = ToolLimits(rate=RateLimit(per_second=RATE, burst=1))
    config = SchedulerConfig(max_concurrency=1, tools={"b": limits_b})
    shared = SharedLimits(config)
    outer = SyncScheduler(config, limits=shared)
    inner = Scheduler(config, limits=shared)
    bucket = shared._bucket("b", limits_b)
    seen: dict[str, float] = {}

    def parent(attempt: Attempt) -> str:
        # The parent holds the one global slot; its nested call to "b" finds no rate token and
        # waits, on a loop its caller then closes (the loop's thread moved on without it).
        with shared.lock:
            while bucket.try_take():
                pass
        loop = asyncio.new_event_loop()
        task = loop.create_task(inner.submit(ToolCall(tool="b", arguments={}), _ok))
        task._log_destroy_pending = False  # left pending on purpose: its loop closes under it
        while not shared.nested_waiting:
            loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        end = time.monotonic() + WAIT_S
        while shared.nested_waiting and time.monotonic() < end:  # the rate timer's dispatch drops it
            time.sleep(0.001)
        with shared.lock:
            seen["level"] = bucket.level
            seen["waiting"] = len(shared.nested_waiting)
        assert not task.done()  # it never ran
        return "parent"

    try:
        assert outer.submit(ToolCall(tool="a", arguments={}), parent) == "parent"
    finally:
        outer.close()
        shared.close()
    assert seen["waiting"] == 0
    # The token taken for the call that cannot start is back: the bucket is full again (burst 1),
    # where the lost token left it nearly empty for another 1 / RATE seconds.
    assert seen["level"] >= 0.99
