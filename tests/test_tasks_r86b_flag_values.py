"""A refused ``preemptible`` or ``drain`` (and a refused drain ``timeout_s``) is quoted as
``shown`` quotes a wrong argument: an integer past 4,300 digits is an ``InputError`` naming its
size, not a bare ``ValueError`` out of ``repr`` (raised by ``submit`` as it was called), and a
10 MB string is named by its type, not written into the message whole (review R86b)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_gate_run import Setup

from agentgate import Call
from agentgate.errors import InputError
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, SyncScheduler, ToolCall

HOSTILE: list[Any] = [10**5000, "f" * 10_000_000]


async def _tool(_attempt: Attempt) -> str:
    return "ran"


@pytest.mark.parametrize("flag", HOSTILE, ids=["huge int", "10 MB text"])
async def test_submit_and_aclose_refuse_a_hostile_flag_in_a_short_message(flag: Any) -> None:
    scheduler = Scheduler(SchedulerConfig())
    try:
        with pytest.raises(InputError, match="submit's preemptible must be True or False, got ") as caught:
            await scheduler.submit(ToolCall("t"), _tool, preemptible=flag)
        assert len(str(caught.value)) < 200
        with pytest.raises(InputError, match="aclose's drain must be True or False, got ") as caught:
            await scheduler.aclose(drain=flag)
        assert len(str(caught.value)) < 200
        with pytest.raises(InputError, match="the drain timeout_s must be a number") as caught:
            await scheduler.aclose(timeout_s=flag if isinstance(flag, str) else [flag])
        assert len(str(caught.value)) < 200
        assert await scheduler.submit(ToolCall("t"), _tool) == "ran"  # nothing stopped
    finally:
        await scheduler.aclose()


def test_a_huge_integer_preemptible_is_refused_naming_its_size() -> None:
    scheduler = Scheduler(SchedulerConfig())
    with pytest.raises(InputError, match=r"got an integer of \d+ bits"):
        asyncio.run(scheduler.submit(ToolCall("t"), _tool, preemptible=10**5000))  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", HOSTILE, ids=["huge int", "10 MB text"])
def test_sync_close_refuses_a_hostile_drain_in_a_short_message(flag: Any) -> None:
    scheduler = SyncScheduler(SchedulerConfig())
    with pytest.raises(InputError, match="close's drain must be True or False, got ") as caught:
        scheduler.close(drain=flag)
    assert len(str(caught.value)) < 200
    assert scheduler.submit(ToolCall("t"), lambda _attempt: "ran") == "ran"
    scheduler.close()


def test_gate_arun_refuses_a_hostile_preemptible_as_submit_does(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "x"}), call_id="c1")

        async def tool() -> str:
            return "ran"

        with pytest.raises(
            InputError, match=r"preemptible must be True or False, got an integer of \d+ bits"
        ):
            asyncio.run(setup.gate.arun(auth, tool, preemptible=10**5000))  # type: ignore[arg-type]
    finally:
        setup.gate.close()
