"""The flags ``preemptible`` (``Scheduler.submit``, ``Gate.arun``) and ``drain`` (``aclose``,
``SyncScheduler.close``) are True or False: anything else is an ``InputError`` before anything
runs or stops (review R86: read as truth values, ``preemptible="false"`` cut work no
cancellation stops at its deadline and reported the call failed while its effect happened)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_gate_run import Setup

from agentgate import Call
from agentgate.errors import InputError
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SyncScheduler, ToolCall

NOT_FLAGS: list[Any] = ["false", "no", 0, 1, None]


@pytest.mark.parametrize("flag", NOT_FLAGS)
async def test_submit_refuses_a_preemptible_that_is_not_a_bool_before_the_tool_runs(flag: Any) -> None:
    scheduler = Scheduler(SchedulerConfig())
    ran: list[int] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ran"

    try:
        with pytest.raises(InputError, match="submit's preemptible must be True or False"):
            await scheduler.submit(ToolCall("t"), tool, preemptible=flag)
        with pytest.raises(InputError, match="preemptible"):
            await scheduler.submit(ToolCall("t", run_id="r", call_id="c"), tool, preemptible=flag)
        assert ran == []
        assert await scheduler.submit(ToolCall("t"), tool, preemptible=False) == "ran"
    finally:
        await scheduler.aclose()


@pytest.mark.parametrize("flag", NOT_FLAGS)
async def test_aclose_refuses_a_drain_that_is_not_a_bool_and_stops_nothing(flag: Any) -> None:
    scheduler = Scheduler(SchedulerConfig())
    with pytest.raises(InputError, match="aclose's drain must be True or False"):
        await scheduler.aclose(drain=flag)

    async def tool(_attempt: Attempt) -> str:
        return "ran"

    assert await scheduler.submit(ToolCall("t"), tool) == "ran"  # still open
    await scheduler.aclose(drain=False)


def test_sync_close_refuses_a_drain_that_is_not_a_bool_and_closes_nothing() -> None:
    scheduler = SyncScheduler(SchedulerConfig())
    with pytest.raises(InputError, match="close's drain must be True or False"):
        scheduler.close(drain="false")  # type: ignore[arg-type]
    assert scheduler.submit(ToolCall("t"), lambda _attempt: "ran") == "ran"
    scheduler.close(drain=True)


def test_gate_arun_refuses_a_preemptible_that_is_not_a_bool_before_the_allow_is_used(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "x"}), call_id="c1")
        ran: list[str] = []

        async def tool() -> str:
            ran.append("ran")
            return "ran"

        with pytest.raises(InputError, match="preemptible must be True or False, got a str"):
            asyncio.run(setup.gate.arun(auth, tool, preemptible="false"))  # type: ignore[arg-type]
        assert ran == []
        assert asyncio.run(setup.gate.arun(auth, tool, preemptible=False)) == "ran"  # allow unused
    finally:
        setup.gate.close()
