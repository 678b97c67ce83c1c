"""Review R69: a call joining or leaving a running twin moves only the nested calls under it.

``reclass_nested`` (review R68) moved the queued nested calls under a twin whose class a joined
call raised or lowered, but found them by walking every queued nested call of the limits, and up
each one's chain of ancestors: with N nested calls queued under other calls, each join and each
leave visited all N (O(N * M) for M joins). Now the queued nested calls are indexed by their
ancestors, and a join or leave visits only those under the twin.

Shown by counting, not timing: the reads of ``Waiter.granted`` (the first thing a visit reads)
of each queued nested call while the joins come and go.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from test_tasks_r67_priority_inversion import CLASSES, WAIT_S

from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, ToolCall, ToolLimits
from agentgate.tasks._waiter import Waiter

CONFIG = SchedulerConfig(
    tools={"a": ToolLimits(), "b": ToolLimits(concurrency=1)},
    priority_classes=CLASSES,
    default_priority="mid",
)
ANCESTORS = 40  # running calls to ``a``, each waiting for its nested call to ``b``
JOINS = 10  # high calls joining the first of them, one after another, each then leaving


class _CountedReads:
    """``Waiter.granted`` read through its slot, each read of a waiter counted."""

    def __init__(self, slot: Any, reads: Counter[int]) -> None:
        self.slot = slot
        self.reads = reads

    def __get__(self, waiter: Waiter | None, owner: type | None = None) -> Any:
        if waiter is None:
            return self
        self.reads[id(waiter)] += 1
        return self.slot.__get__(waiter, owner)

    def __set__(self, waiter: Waiter, value: bool) -> None:
        self.slot.__set__(waiter, value)


async def test_a_join_and_a_leave_visit_only_the_nested_calls_under_the_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R69: 40 running calls each wait for a nested call queued for the busy tool ``b``;
    a high call joins the first of them and leaves, 10 times. The nested call under it moves up
    and back each time; the other 39 are never visited (until review R69 each was visited at
    every join and every leave: 780 visits)."""
    scheduler = Scheduler(CONFIG)
    shared = scheduler.shared
    release = asyncio.Event()
    go = asyncio.Event()

    async def hold(attempt: Attempt) -> None:
        await release.wait()

    async def nested(attempt: Attempt) -> None:
        pass

    async def ancestor(attempt: Attempt) -> None:
        await go.wait()
        await scheduler.submit(ToolCall("b", priority="low"), nested)

    async def never(attempt: Attempt) -> None:
        raise AssertionError("a joined call does not run")

    tasks = [asyncio.create_task(scheduler.submit(ToolCall("b"), hold))]
    tasks += [
        asyncio.create_task(
            scheduler.submit(ToolCall("a", priority="low", run_id="run", call_id=f"c{i}"), ancestor)
        )
        for i in range(ANCESTORS)
    ]
    go.set()
    while shared.queued != ANCESTORS:
        await asyncio.sleep(0)
    [under] = [w for w in shared.nested_waiting if w.parent is not None and w.parent.call.call_id == "c0"]
    others = [w for w in shared.nested_waiting if w is not under]
    assert len(others) == ANCESTORS - 1
    high, low = CLASSES[0].rank, CLASSES[2].rank
    reads: Counter[int] = Counter()
    with monkeypatch.context() as patch:
        patch.setattr(Waiter, "granted", _CountedReads(Waiter.__dict__["granted"], reads))
        for _ in range(JOINS):
            joiner = asyncio.create_task(
                scheduler.submit(ToolCall("a", priority="high", run_id="run", call_id="c0"), never)
            )
            while shared.queue.rank_of(under) != high:
                await asyncio.sleep(0)
            joiner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await joiner
            assert shared.queue.rank_of(under) == low
    visited_others = sum(reads[id(w)] for w in others)
    assert visited_others == 0, f"{visited_others} visits to nested calls under other calls"
    assert 0 < reads[id(under)] <= 4 * JOINS
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
    assert shared.queued == 0 and shared.in_flight == 0
    assert shared.nested_waiting == {} and shared.nested_under == {}  # the index keeps nothing
    await scheduler.aclose()
