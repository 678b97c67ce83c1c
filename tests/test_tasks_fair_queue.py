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
from agentgate.tasks._fair import Entry, FairQueue


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


def _serve_alone_then_race(first_weight: float, racers_weight: float, served_alone: int) -> str:
    """Tenant ``first`` (``first_weight``) is served ``served_alone`` times with nothing else
    waiting; then tenants a and b, both of ``racers_weight``, queue ten calls each (interleaved):
    the order in which the next twenty start, as a string of tenant names."""
    queue: FairQueue[str] = FairQueue()

    def push(tenant: str, weight: float) -> None:
        queue.push_entry(Entry(tenant), 0, "c", 1.0, tenant, weight, f"agent-{tenant}", "t")

    for _ in range(served_alone):
        push("first", first_weight)
    while queue.size:
        queue.pop({"t"}, None, None)
    for _ in range(10):
        push("a", racers_weight)
        push("b", racers_weight)
    return "".join(str(queue.pop({"t"}, None, None)) for _ in range(20))


@pytest.mark.parametrize(
    ("first_weight", "racers_weight", "served_alone"),
    [
        (1e-309, 1.0, 2),  # a tiny weight's stride 1/weight was infinite
        (5e-324, 1.0, 2),  # the smallest float
        (1.0, 1e17, 10),  # a huge weight's stride vanished against a pass of 10
        (1.0, 1e12, 100_000),  # ... and a large one's against a pass of 100,000
    ],
)
def test_two_tenants_of_equal_weight_alternate_whatever_the_weights(
    first_weight: float, racers_weight: float, served_alone: int
) -> None:
    """Kills: passes grown by ``1.0 / weight`` in floats. A tiny weight made a pass infinite, and
    then the virtual time of its level: every tenant entering after it tied at infinity and was
    served in the order it was made (a, all ten, then b). A huge weight's stride was lost in the
    pass it was added to, so the pass of a and of b never grew: a tie for good, a first. Rule: two
    tenants of equal weight that both wait alternate, whatever the weights and the history."""
    assert _serve_alone_then_race(first_weight, racers_weight, served_alone) == "ab" * 10


def test_weights_still_share_in_their_ratio() -> None:
    """Integer strides keep the ratios: weights 3 and 1 share 3 to 1, 0.5 and 0.25 share 2 to 1."""
    for heavy, light, expected in ((3.0, 1.0, 3), (0.5, 0.25, 2)):
        queue: FairQueue[str] = FairQueue()
        for _ in range(40):
            queue.push_entry(Entry("h"), 0, "c", 1.0, "h", heavy, "p", "t")
            queue.push_entry(Entry("l"), 0, "c", 1.0, "l", light, "p", "t")
        served = [queue.pop({"t"}, None, None) for _ in range(10 * (expected + 1))]
        assert served.count("h") == expected * served.count("l"), served
