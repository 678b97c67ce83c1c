"""The fair queue (agentgate/tasks/_fair.py): one agent's waiting calls start in the order they
came, whatever tools they are for; its fast dispatch (one open tool, no tenant or agent limits)
serves exactly the calls, in exactly the order, that its general walk of the tree serves."""

from __future__ import annotations

import asyncio
import random

import pytest
from test_tasks_queue_and_loops import fair_queue_workload

from agentgate.tasks import (
    Attempt,
    Scheduler,
    SchedulerConfig,
    ToolCall,
    _fair,
)
from agentgate.tasks._fair import FairQueue


def _never(*_keys: str) -> bool:
    """A tenant / agent predicate that blocks nothing: it makes ``pop`` take its general walk."""
    return False


def _run(seed: int, *, general: bool) -> list[object]:
    def pop(queue: FairQueue[tuple[int, str]], rng: random.Random) -> object:
        tool = rng.choice("abcd")  # "d": no call waits for it
        return queue.pop({tool}, _never, _never) if general else queue.pop({tool}, None, None)

    return fair_queue_workload(seed, pop, agents=60, tenants=5, weights=3)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("heap_at", [2, 32, 10**9])
def test_one_open_tool_without_limits_pops_what_the_general_walk_pops(
    seed: int, heap_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Classes of two ranks, weighted tenants, up to 60 agents, calls leaving the queue early; with
    heaps from 2 waiting children on, from 32 on (the default) and never."""
    monkeypatch.setattr(_fair, "_HEAP_AT", heap_at)
    monkeypatch.setattr(_fair, "_HEAP_OFF", min(heap_at, 8))
    fast = _run(seed, general=False)
    assert fast == _run(seed, general=True)
    assert sum(item is not None for item in fast) > 500
    assert None in fast  # and a tool nobody waits for pops nothing


async def test_one_agents_calls_to_two_tools_start_in_arrival_order() -> None:
    """Under a global limit of 1, one agent's waiting calls to tools a and b start in the order
    they came (the agent's tool FIFOs are merged by arrival). Kills: ``_pick_tool`` choosing the
    FIFO whose head came last (``queue[0].seq > best[0].seq``)."""
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1))
    gate = asyncio.Event()
    order: list[str] = []

    async def hold(attempt: Attempt) -> None:
        await gate.wait()

    def named(name: str):  # type: ignore[no-untyped-def]
        async def tool(attempt: Attempt) -> None:
            order.append(name)

        return tool

    holding = asyncio.create_task(scheduler.submit(ToolCall("h"), hold))
    await asyncio.sleep(0)
    waiting = []
    for n, tool in enumerate(["a", "b", "a", "b", "b", "a"]):
        waiting.append(asyncio.create_task(scheduler.submit(ToolCall(tool), named(f"{tool}{n}"))))
        await asyncio.sleep(0)
        assert scheduler.queued == n + 1
    gate.set()
    await asyncio.gather(holding, *waiting)
    assert order == ["a0", "b1", "a2", "b3", "b4", "a5"]
    await scheduler.aclose()
