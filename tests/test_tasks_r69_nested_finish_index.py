"""Review R69: a finish visits only the queued nested calls it can unblock, in the order they came.

``_start_nested_waiting`` walked every queued nested call, with a borrowing plan each, on every
``finish`` that left calls queued and on every call queued for a tool with room or a rate limit:
with N nested calls queued and M finishes, O(N * M) however unrelated the finishes were. Now a
finish visits the nested calls under an ancestor whose lent slot it gave back (``nested_under``),
and those counting against a slot it freed that is still free after the queue's dispatch
(``nested_by``; a global slot: every one of them), in the order they came, as before; a call
queued looks only at itself (the others could not start at the last look, and since then slots
were only taken). ``lend_priority`` likewise visits only the nested calls under an ancestor running
the full tool (``nested_under_tool``), not every one.

Shown by counting, not timing: the reads of a waiter slot (``granted``, the first thing a visit of
``_start_nested_waiting`` reads; ``alive``, the first of ``lend_priority``) of each queued nested
call, and the calls of the new helpers by calls that are not nested (none).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from typing import Any

import pytest
from test_tasks_r67_priority_inversion import CLASSES, WAIT_S

from agentgate.tasks import (
    Attempt,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    TenantShare,
    ToolCall,
    ToolLimits,
)
from agentgate.tasks._fair import Entry
from agentgate.tasks._waiter import Waiter


class _CountedReads:
    """A slot of ``Waiter`` read through its descriptor, each read of a waiter counted."""

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


def _slot(name: str) -> Any:
    return Waiter.__dict__.get(name) or Entry.__dict__[name]


async def _until(condition: Any) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0)


@pytest.mark.parametrize("first", ["W1", "W2"])
async def test_nested_calls_a_finish_unblocks_start_in_the_order_they_came(
    first: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R69: one finish unblocks two queued nested calls for two reasons: ``W1`` because
    the finished call gave back the tool slot it borrowed from ``W1``'s parent, ``W2`` because
    it freed a slot of tenant ``t`` (``W2`` borrows its tool's slot from its own parent). They
    start in the order they came, whichever reason comes first (pinned before indexing the walk)."""
    config = SchedulerConfig(
        tools={"b": ToolLimits(concurrency=1), "c": ToolLimits(concurrency=1)},
        tenants={"t": TenantShare(concurrency=1)},
    )
    scheduler = Scheduler(config)
    shared = scheduler.shared
    started: list[str] = []
    start = shared.start

    def recorded(waiter: Waiter) -> None:
        started.append(waiter.call.call_id or "")
        start(waiter)

    monkeypatch.setattr(shared, "start", recorded)
    release_s, release = asyncio.Event(), asyncio.Event()
    submit = {"W1": asyncio.Event(), "W2": asyncio.Event()}

    async def hold_s(attempt: Attempt) -> None:
        await release_s.wait()

    async def hold(attempt: Attempt) -> None:
        await release.wait()

    async def parent_b(attempt: Attempt) -> None:
        borrower = asyncio.create_task(scheduler.submit(ToolCall("b", tenant="t", call_id="S"), hold_s))
        await submit["W1"].wait()
        await asyncio.gather(borrower, scheduler.submit(ToolCall("b", tenant="u", call_id="W1"), hold))

    async def parent_c(attempt: Attempt) -> None:
        await submit["W2"].wait()
        await scheduler.submit(ToolCall("c", tenant="t", call_id="W2"), hold)

    tasks = [
        asyncio.create_task(scheduler.submit(ToolCall("b", tenant="u", call_id="P"), parent_b)),
        asyncio.create_task(scheduler.submit(ToolCall("c", tenant="u", call_id="P2"), parent_c)),
    ]
    await _until(lambda: started == ["P", "P2", "S"])
    second = "W2" if first == "W1" else "W1"
    submit[first].set()
    await _until(lambda: shared.queued == 1)
    submit[second].set()
    await _until(lambda: shared.queued == 2)
    assert list(w.call.call_id for w in shared.nested_waiting) == [first, second]
    release_s.set()
    await _until(lambda: shared.queued == 0)
    assert started == ["P", "P2", "S", first, second]
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
    assert shared.in_flight == 0 and not shared.nested_waiting
    await scheduler.aclose()


CONFIG = SchedulerConfig(
    tools={"b": ToolLimits(concurrency=1), "d": ToolLimits(concurrency=1)},
    priority_classes=CLASSES,
    default_priority="mid",
)
ANCESTORS = 40  # running calls to ``a``, each waiting for its nested call to ``b``, held by another
FINISHES = 10  # unrelated calls that finish while those wait


async def _waiting_under_others(
    scheduler: Scheduler, release: asyncio.Event
) -> tuple[list[asyncio.Task[Any]], list[Waiter]]:
    """``ANCESTORS`` calls to ``a``, each waiting for a nested call queued for ``b``, which a
    call that is not nested holds until ``release``."""
    shared = scheduler.shared

    async def hold(attempt: Attempt) -> None:
        await release.wait()

    async def nested(attempt: Attempt) -> None:
        pass

    async def ancestor(attempt: Attempt) -> None:
        await scheduler.submit(ToolCall("b", priority="low"), nested)

    tasks = [asyncio.create_task(scheduler.submit(ToolCall("b"), hold))]
    await _until(lambda: shared.in_flight == 1)
    tasks += [
        asyncio.create_task(scheduler.submit(ToolCall("a", priority="low", call_id=f"a{i}"), ancestor))
        for i in range(ANCESTORS)
    ]
    await _until(lambda: shared.queued == ANCESTORS)
    return tasks, list(shared.nested_waiting)


async def test_a_finish_visits_only_the_nested_calls_it_can_unblock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R69: 40 nested calls wait for ``b`` (held by a call that is not nested); 10
    unrelated calls finish one after another, then a call that borrowed its parent's ``d`` slot
    gives it back, unblocking its sibling. The 40 are never visited; the sibling starts (until
    review R69 every finish, and every call queued for a tool with room, visited all queued
    nested calls: 960 visits to the 40)."""
    scheduler = Scheduler(CONFIG)
    shared = scheduler.shared
    release, release_s, go_on = asyncio.Event(), asyncio.Event(), asyncio.Event()
    tasks, others = await _waiting_under_others(scheduler, release)

    async def hold_s(attempt: Attempt) -> None:
        await release_s.wait()

    async def sibling(attempt: Attempt) -> str:
        return "sibling"

    async def parent(attempt: Attempt) -> list[Any]:
        borrower = asyncio.create_task(scheduler.submit(ToolCall("d", call_id="S"), hold_s))
        await go_on.wait()
        return await asyncio.gather(borrower, scheduler.submit(ToolCall("d", call_id="W"), sibling))

    async def quick(attempt: Attempt) -> None:
        pass

    reads: Counter[int] = Counter()
    with monkeypatch.context() as patch:
        patch.setattr(Waiter, "granted", _CountedReads(_slot("granted"), reads))
        for i in range(FINISHES):
            await asyncio.wait_for(scheduler.submit(ToolCall("c", call_id=f"c{i}"), quick), WAIT_S)
        parent_task = asyncio.create_task(scheduler.submit(ToolCall("d", call_id="P"), parent))
        await _until(lambda: shared.tool_in_flight.get("d") == 1 and len(shared.queue.tool_sizes) == 1)
        await asyncio.sleep(0)
        go_on.set()
        await _until(lambda: shared.queued == ANCESTORS + 1)
        release_s.set()
        assert await asyncio.wait_for(parent_task, WAIT_S) == [None, "sibling"]
    visited = sum(reads[id(w)] for w in others)
    assert visited == 0, f"{visited} visits to nested calls no finish could unblock"
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
    assert shared.queued == 0 and shared.in_flight == 0
    assert not shared.nested_waiting and not shared.nested_under and not shared.nested_by
    assert not shared.nested_under_tool
    await scheduler.aclose()


async def test_a_call_queued_for_a_full_tool_lifts_only_the_nested_calls_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R69: 40 nested calls wait for ``b`` under calls to ``a``; one more waits for ``b``
    under a call to ``d``, which is full. A high call queued for ``d`` lifts that one to its class
    (``lend_priority``) and visits none of the 40 (until review R69 it visited every queued
    nested call: 40 visits)."""
    scheduler = Scheduler(CONFIG)
    shared = scheduler.shared
    release, go_on = asyncio.Event(), asyncio.Event()
    tasks, others = await _waiting_under_others(scheduler, release)

    async def nested(attempt: Attempt) -> None:
        pass

    async def under_d(attempt: Attempt) -> None:
        await scheduler.submit(ToolCall("b", priority="low", call_id="W"), nested)

    async def high(attempt: Attempt) -> None:
        await go_on.wait()

    tasks.append(asyncio.create_task(scheduler.submit(ToolCall("d", priority="low"), under_d)))
    await _until(lambda: shared.queued == ANCESTORS + 1)
    [lifted] = [w for w in shared.nested_waiting if w.call.call_id == "W"]
    reads: Counter[int] = Counter()
    with monkeypatch.context() as patch:
        patch.setattr(Waiter, "alive", _CountedReads(_slot("alive"), reads))
        tasks.append(asyncio.create_task(scheduler.submit(ToolCall("d", priority="high"), high)))
        await _until(lambda: shared.queued == ANCESTORS + 2)
    assert shared.queue.rank_of(lifted) == CLASSES[0].rank
    visited = sum(reads[id(w)] for w in others)
    assert visited == 0, f"{visited} visits to nested calls under no call to d"
    assert reads[id(lifted)] > 0
    release.set()
    go_on.set()
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
    assert shared.queued == 0 and shared.in_flight == 0
    await scheduler.aclose()


def test_calls_that_are_not_nested_do_no_nested_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R69: calls that are not nested, queued behind a full tool and started as slots
    come free, never index or look for nested calls (the hot path is as it was). Only the calls
    on this test's own limits are counted: the methods are patched on the class, and limits of
    another test may still be at work in this process (a thread, a timer; review R69: counted
    class-wide, this test failed once under ``pytest -n 2``)."""
    counts: Counter[str] = Counter()
    own = SharedLimits(SchedulerConfig(tools={"b": ToolLimits(concurrency=1)}))
    for name in ("_nest", "_unnest", "_unblocking", "_unblocked", "_start_nested_waiting", "lend_priority"):
        method = getattr(SharedLimits, name)

        def counted(self: SharedLimits, *args: Any, _method: Any = method, _name: str = name) -> Any:
            if self is own:
                counts[_name] += 1
            return _method(self, *args)

        monkeypatch.setattr(SharedLimits, name, counted)

    async def main() -> None:
        scheduler = Scheduler(limits=own)
        gate = asyncio.Event()

        async def hold(attempt: Attempt) -> None:
            await gate.wait()

        tasks = [asyncio.create_task(scheduler.submit(ToolCall("b"), hold)) for _ in range(20)]
        await _until(lambda: scheduler.shared.queued == 19)
        gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
        await scheduler.aclose()

    # In a context of its own: the calls are nested when the context they are submitted in names a
    # running attempt (``tasks._waiter.RUNNING``), and in one full clean-clone run this worker's
    # main context still named one (left by an earlier test: 19 calls counted as nested).
    contextvars.Context().run(asyncio.run, main())
    own.close()
    assert counts == Counter(), counts
