"""Review R73: closing a scheduler one of whose calls was left queued on an event loop since closed.

A call queued from a second event loop, in a thread, whose loop is then closed, can never run
again: its task is pending for good. ``aclose`` waited for it (drain) or for its cancellation,
which a closed loop never delivers, so it never returned; and the task, a cycle with its
scheduler, was collected whenever the collector next ran: in the full suite, at a pytest-xdist
worker's exit, where asyncio printed "Task was destroyed but it is pending!" for
``Scheduler._run`` (test_tasks_r69_closed_loop_lender left it so).

Real schedulers on one ``SharedLimits``, a real second loop in a real thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import threading
import weakref

import pytest

from agentgate.tasks import Scheduler, SchedulerConfig, SharedLimits, ToolCall, ToolLimits

WAIT_S = 10.0
CONFIG = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


async def _never_runs(_attempt: object) -> str:
    return "never"


def _queue_then_close_loop(other: Scheduler, limits: SharedLimits) -> weakref.ref[asyncio.Task[str]]:
    """Queue a call of ``other`` on a new loop in a thread, close that loop; its task, weakly."""
    made: list[weakref.ref[asyncio.Task[str]]] = []

    def run() -> None:
        loop = asyncio.new_event_loop()

        async def queue() -> None:
            made.append(weakref.ref(asyncio.ensure_future(other.submit(ToolCall("t"), _never_runs))))
            while limits.queued != 1:
                await asyncio.sleep(0)

        contextvars.Context().run(loop.run_until_complete, queue())  # not nested in the held call
        loop.close()  # its queued call never runs again

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive() and limits.queued == 1
    return made[0]


@pytest.mark.parametrize("drain", [True, False])
async def test_aclose_returns_past_a_call_whose_loop_was_closed(
    drain: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R73: ``aclose`` of a scheduler whose only call waits on a closed loop returns
    (it hung, draining or not), the scheduler refuses calls after it, and the dead task is
    collectable then and there: asyncio's "destroyed but pending" report comes in this test,
    not at the process's exit."""
    limits = SharedLimits(CONFIG)
    scheduler = Scheduler(limits=limits)
    other = Scheduler(limits=limits)
    release = asyncio.Event()

    async def hold(_attempt: object) -> None:
        await release.wait()

    holder = asyncio.create_task(scheduler.submit(ToolCall("t"), hold))
    while limits.in_flight != 1:
        await asyncio.sleep(0)
    dead = await asyncio.to_thread(_queue_then_close_loop, other, limits)

    await asyncio.wait_for(other.aclose(drain=drain), WAIT_S)  # a guard: it hung for good

    with pytest.raises(Exception, match="closed"):
        await other.submit(ToolCall("t"), _never_runs)
    release.set()
    await asyncio.wait_for(holder, WAIT_S)
    await scheduler.aclose()
    limits.close()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
    assert dead() is None
    assert any("Scheduler._run" in record.getMessage() for record in caplog.records), caplog.text
