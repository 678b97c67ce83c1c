"""Calls made by a running tool (nested calls) run under a slot their ancestor holds.

Before: with ``concurrency: 1`` on a limit the parent held, the nested call waited for the
parent's own slot until its deadline (forever without one). Every nested call here has a
deadline a few seconds away, so a regression fails fast with ``DeadlineExceeded``, not a hang.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_tasks_shared_limits import Peak, lookup_policy

from agentgate.capabilities import Call
from agentgate.errors import DeadlineExceeded
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store._base import Store
from agentgate.store._sqlite import SQLiteStore
from agentgate.store.leases import LeaseManager
from agentgate.tasks import (
    Attempt,
    PriorityClass,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    TenantShare,
    ToolCall,
    ToolLimits,
)

LIMITS_OF_ONE = {
    "tool": SchedulerConfig(tools={"a": ToolLimits(concurrency=1)}),
    "global": SchedulerConfig(max_concurrency=1),
    "tenant": SchedulerConfig(tenant=TenantShare(concurrency=1)),
    "principal": SchedulerConfig(principal_concurrency=1),
}


def _call(tool: str, **arguments: object) -> ToolCall:
    return ToolCall(tool, arguments=dict(arguments), deadline=time.time() + 3.0)


@pytest.mark.parametrize("limit", sorted(LIMITS_OF_ONE))
def test_sync_nested_call_runs_under_its_parents_slot(limit: str) -> None:
    with SyncScheduler(LIMITS_OF_ONE[limit]) as scheduler:

        def parent(attempt: Attempt) -> str:
            # The same tool: the tool limit is the parent's own too.
            inner = scheduler.submit(_call("a", level=2), lambda _: "child")
            return "parent+" + inner

        assert scheduler.submit(_call("a", level=1), parent) == "parent+child"
        assert scheduler.scheduler.in_flight == 0
        # Every slot is back: a top-level call starts at once.
        assert scheduler.submit(_call("a"), lambda _: "after") == "after"


@pytest.mark.parametrize("limit", sorted(LIMITS_OF_ONE))
def test_async_nested_call_runs_under_its_parents_slot(limit: str) -> None:
    async def main() -> str:
        scheduler = Scheduler(LIMITS_OF_ONE[limit])

        async def child(attempt: Attempt) -> str:
            await asyncio.sleep(0)
            return "child"

        async def parent(attempt: Attempt) -> str:
            return "parent+" + await scheduler.submit(_call("a", level=2), child)

        try:
            async with asyncio.timeout(5):
                return await scheduler.submit(_call("a", level=1), parent)
        finally:
            assert scheduler.in_flight == 0
            await scheduler.aclose()

    assert asyncio.run(main()) == "parent+child"


def test_three_levels_deep_sync_and_async() -> None:
    config = SchedulerConfig(max_concurrency=1, tools={"a": ToolLimits(concurrency=1)})
    with SyncScheduler(config) as scheduler:

        def level(depth: int) -> Callable[[Attempt], str]:
            def run(attempt: Attempt) -> str:
                if depth == 3:
                    return "3"
                return f"{depth}>" + scheduler.submit(_call("a", depth=depth + 1), level(depth + 1))

            return run

        assert scheduler.submit(_call("a", depth=1), level(1)) == "1>2>3"

    async def main() -> str:
        scheduler = Scheduler(config)

        def level(depth: int, tool: str) -> Callable[[Attempt], asyncio.Future[str]]:
            async def run(attempt: Attempt) -> str:
                if depth == 3:
                    return "3"
                # a -> b -> a: the third level borrows the tool slot of the first, the global of the second
                inner = await scheduler.submit(
                    _call("b" if tool == "a" else "a", depth=depth + 1),
                    level(depth + 1, "b" if tool == "a" else "a"),
                )
                return f"{depth}>" + inner

            return run  # type: ignore[return-value]

        try:
            async with asyncio.timeout(5):
                return await scheduler.submit(_call("a", depth=1), level(1, "a"))
        finally:
            await scheduler.aclose()

    assert asyncio.run(main()) == "1>2>3"


def test_unrelated_calls_still_wait_for_the_parents_slot() -> None:
    """The lent slot is not free: a top-level call to the same tool starts only after the parent."""
    order: list[str] = []

    async def main() -> None:
        scheduler = Scheduler(SchedulerConfig(tools={"a": ToolLimits(concurrency=1)}))
        child_running = asyncio.Event()
        release = asyncio.Event()

        async def child(attempt: Attempt) -> None:
            order.append("child start")
            child_running.set()
            await release.wait()
            order.append("child end")

        async def parent(attempt: Attempt) -> None:
            await scheduler.submit(_call("a", role="child"), child)
            order.append("parent end")

        async def other(attempt: Attempt) -> None:
            order.append("other")

        async with asyncio.timeout(5):
            first = asyncio.create_task(scheduler.submit(_call("a", role="parent"), parent))
            await child_running.wait()
            second = asyncio.create_task(scheduler.submit(_call("a", role="other"), other))
            for _ in range(20):
                await asyncio.sleep(0)
            assert scheduler.queued == 1  # the unrelated call waits
            release.set()
            await asyncio.gather(first, second)
        await scheduler.aclose()

    asyncio.run(main())
    assert order == ["child start", "child end", "parent end", "other"]


def test_concurrent_nested_siblings_share_the_one_lent_slot() -> None:
    """A parent that starts several nested calls at once lends its slot to one at a time."""
    running = 0
    peak = 0

    async def main() -> list[int]:
        nonlocal running, peak
        scheduler = Scheduler(SchedulerConfig(tools={"a": ToolLimits(concurrency=1)}))

        async def child(attempt: Attempt) -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1
            return int(attempt.call.arguments["i"])

        async def parent(attempt: Attempt) -> list[int]:
            return list(await asyncio.gather(*(scheduler.submit(_call("a", i=i), child) for i in range(4))))

        try:
            async with asyncio.timeout(5):
                return await scheduler.submit(_call("a", role="parent"), parent)
        finally:
            await scheduler.aclose()

    assert asyncio.run(main()) == [0, 1, 2, 3]
    assert peak == 1


def test_sync_siblings_in_threads_share_the_one_lent_slot() -> None:
    """Nested calls from threads the tool starts (with its context) run one at a time."""
    import contextvars

    lock = threading.Lock()
    running = {"now": 0, "peak": 0}
    with SyncScheduler(SchedulerConfig(max_concurrency=1)) as scheduler:

        def child(attempt: Attempt) -> int:
            with lock:
                running["now"] += 1
                running["peak"] = max(running["peak"], running["now"])
            time.sleep(0.01)
            with lock:
                running["now"] -= 1
            return int(attempt.call.arguments["i"])

        def parent(attempt: Attempt) -> list[int]:
            results: list[int] = [0] * 3

            def one(i: int) -> None:
                results[i] = scheduler.submit(_call("b", i=i), child)

            threads = [
                threading.Thread(target=contextvars.copy_context().run, args=(one, i)) for i in range(3)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(5)
            return results

        assert scheduler.submit(_call("a"), parent) == [0, 1, 2]
    assert running["peak"] == 1


def test_a_detached_nested_call_keeps_the_slot_after_its_parent_ends() -> None:
    """A nested task that outlives its parent's attempt inherits the lent slot: the limit holds."""

    async def main() -> None:
        scheduler = Scheduler(SchedulerConfig(tools={"a": ToolLimits(concurrency=1)}))
        release = asyncio.Event()
        started = asyncio.Event()
        detached: list[asyncio.Task[None]] = []

        async def child(attempt: Attempt) -> None:
            started.set()
            await release.wait()

        async def parent(attempt: Attempt) -> None:
            detached.append(asyncio.create_task(scheduler.submit(_call("a", role="child"), child)))
            await started.wait()

        async with asyncio.timeout(5):
            await scheduler.submit(_call("a", role="parent"), parent)
            assert scheduler.in_flight == 1  # the child now holds the slot itself
            other = asyncio.create_task(scheduler.submit(_call("a", role="other"), child))
            for _ in range(20):
                await asyncio.sleep(0)
            assert scheduler.queued == 1 and not other.done()
            release.set()
            await asyncio.gather(detached[0], other)
        assert scheduler.in_flight == 0
        await scheduler.aclose()

    asyncio.run(main())


def test_nested_call_on_other_limits_is_not_exempt() -> None:
    """A nested call never runs under a slot of a Gate (SharedLimits) its parent is not in."""

    async def main() -> None:
        config = SchedulerConfig(tools={"a": ToolLimits(concurrency=1)})
        outer = Scheduler(config)
        other = Scheduler(limits=SharedLimits(config))
        blocker = asyncio.Event()

        async def hold(attempt: Attempt) -> None:
            await blocker.wait()

        async def parent(attempt: Attempt) -> None:
            await other.submit(ToolCall("a", deadline=time.time() + 0.2), hold)

        holding = asyncio.create_task(other.submit(_call("a", role="holder"), hold))
        await asyncio.sleep(0)
        with pytest.raises(DeadlineExceeded):
            await outer.submit(_call("a", role="parent"), parent)
        blocker.set()
        await holding
        await outer.aclose()
        await other.aclose()
        other.shared.close()

    asyncio.run(main())


def test_sync_nested_call_with_a_store_skips_a_second_lease(store: Store) -> None:
    """With cross-process leases (tool limit 1 across processes) the nested call to the same tool
    runs under the parent's lease instead of polling for a second one until its deadline."""
    config = SchedulerConfig(tools={"a": ToolLimits(concurrency=1)})
    with SyncScheduler(config, store=store) as scheduler:

        def parent(attempt: Attempt) -> str:
            return "parent+" + scheduler.submit(_call("a", level=2), lambda _: "child")

        assert scheduler.submit(_call("a", level=1), parent) == "parent+child"


def test_async_nested_call_with_a_store_on_another_tool_takes_its_own_lease(store: Store) -> None:
    """Only a borrowed tool slot skips the lease: a nested call to another limited tool still takes
    a lease of its own (other processes are still kept to that tool's limit)."""
    config = SchedulerConfig(
        max_concurrency=1, tools={"a": ToolLimits(concurrency=1), "b": ToolLimits(concurrency=1)}
    )
    other_process = LeaseManager(store, ttl_s=10.0)
    held = other_process.try_acquire("tool:b", 1)
    assert held is not None

    async def main() -> None:
        scheduler = Scheduler(config, store=store)

        async def parent(attempt: Attempt) -> None:
            await scheduler.submit(ToolCall("b", deadline=time.time() + 0.5), child)

        async def child(attempt: Attempt) -> None:
            raise AssertionError("b ran while another process held its only lease")

        try:
            with pytest.raises(DeadlineExceeded):
                await scheduler.submit(_call("a"), parent)
        finally:
            await scheduler.aclose()

    try:
        asyncio.run(main())
    finally:
        other_process.release(held)
        other_process.close()


def test_an_async_tool_calling_the_sync_scheduler_of_the_same_limits_is_nested() -> None:
    """A Gate's shape: one SharedLimits for its sync and async schedulers. An async tool that runs
    a sync call through ``asyncio.to_thread`` (which carries its context) runs it under its slot."""
    limits = SharedLimits(SchedulerConfig(max_concurrency=1))
    sync = SyncScheduler(limits=limits)

    async def main() -> str:
        scheduler = Scheduler(limits=limits)

        async def parent(attempt: Attempt) -> str:
            return await asyncio.to_thread(sync.submit, _call("b"), lambda _: "sync child")

        try:
            async with asyncio.timeout(5):
                return await scheduler.submit(_call("a"), parent)
        finally:
            await scheduler.aclose()

    try:
        assert asyncio.run(main()) == "sync child"
        assert limits.in_flight == 0
    finally:
        sync.close()
        limits.close()


def test_a_thread_without_the_tools_context_is_not_nested() -> None:
    """A thread that does not carry the tool's context (a plain ``threading.Thread``) makes an
    ordinary call: it waits for the slot like any other (here until its deadline)."""
    with SyncScheduler(SchedulerConfig(max_concurrency=1)) as scheduler:

        def parent(attempt: Attempt) -> str:
            outcome: list[BaseException] = []

            def plain() -> None:
                try:
                    scheduler.submit(ToolCall("b", deadline=time.time() + 0.3), lambda _: "ran")
                except DeadlineExceeded as exc:
                    outcome.append(exc)

            thread = threading.Thread(target=plain)
            thread.start()
            thread.join(5)
            return "refused" if outcome else "ran"

        assert scheduler.submit(_call("a"), parent) == "refused"


def test_a_gate_tool_that_calls_the_gate_again_completes(tmp_path: Path) -> None:
    """End to end: a tool run by ``Gate.run`` (policy limit ``concurrency: 1`` on it) makes
    another authorized call of the same tool through the same Gate; sync and async. Grants live
    5 s, so a nested call waiting for its parent's slot (the regression) fails at their expiry."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    config = SchedulerConfig(tools={"lookup": ToolLimits(concurrency=1)})
    gate = Gate(
        parse_policy(lookup_policy(keys).replace("ttl_s: 600", "ttl_s: 5"), source="nested.yaml"),
        SQLiteStore(tmp_path / "g.db"),
        scheduler=config,
    )
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")

        def inner() -> str:
            return "inner"

        def outer() -> str:
            auth = gate.authorize(agent, Call.tool("lookup", {"id": "inner"}))
            return "outer+" + gate.run(auth, inner)

        assert gate.run(gate.authorize(agent, Call.tool("lookup", {"id": "outer"})), outer) == "outer+inner"

        async def ainner() -> str:
            return "inner"

        async def aouter() -> str:
            auth = gate.authorize(agent, Call.tool("lookup", {"id": "ainner"}))
            return "outer+" + await gate.arun(auth, ainner)

        async def main() -> str:
            async with asyncio.timeout(10):
                auth = gate.authorize(agent, Call.tool("lookup", {"id": "aouter"}))
                return await gate.arun(auth, aouter)

        assert asyncio.run(main()) == "outer+inner"
        assert gate._limits.in_flight == 0
    finally:
        gate.close()


def test_many_parents_in_threads_each_with_a_nested_call_under_a_global_limit() -> None:
    """Eight threads, a global limit of 2: before, two parents took both slots and their children
    waited for them until their deadlines (each child's slot held by another waiting parent).
    Now each child runs under its own parent's slot; at most two parents and two children run."""
    parents, children = Peak(), Peak()

    with SyncScheduler(SchedulerConfig(max_concurrency=2)) as scheduler:

        def child(attempt: Attempt) -> int:
            children.enter()
            time.sleep(0.005)
            children.leave()
            return int(attempt.call.arguments["i"])

        def parent(attempt: Attempt) -> int:
            parents.enter()
            try:
                return scheduler.submit(_call("b", i=attempt.call.arguments["i"]), child)
            finally:
                parents.leave()

        results: list[int] = []

        def one(i: int) -> None:
            results.append(scheduler.submit(_call("a", i=i), parent))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert sorted(results) == list(range(8))
        assert scheduler.scheduler.in_flight == 0 and not scheduler.scheduler.shared.nested_waiting
    assert parents.peak <= 2 and children.peak <= 2


def test_a_queued_nested_call_that_times_out_leaves_nothing_behind() -> None:
    async def main() -> None:
        scheduler = Scheduler(SchedulerConfig(tools={"a": ToolLimits(concurrency=1)}))
        release = asyncio.Event()

        async def slow(attempt: Attempt) -> str:
            await release.wait()
            return "slow"

        async def quick(attempt: Attempt) -> str:
            return "quick"

        async def parent(attempt: Attempt) -> str:
            first = asyncio.ensure_future(scheduler.submit(_call("a", i=1), slow))
            await asyncio.sleep(0)
            # The lent slot is busy with the first child: the second waits, then gives up.
            with pytest.raises(DeadlineExceeded):
                await scheduler.submit(ToolCall("a", deadline=time.time() + 0.1), quick)
            assert not scheduler.shared.nested_waiting and scheduler.queued == 0
            release.set()
            return await first

        async with asyncio.timeout(5):
            assert await scheduler.submit(_call("a", i=0), parent) == "slow"
        assert scheduler.in_flight == 0
        await scheduler.aclose()

    asyncio.run(main())


def test_the_chain_of_ancestors_runs_through_a_nested_call_that_started_at_once() -> None:
    """a -> b -> a with only tool a limited: b starts at once (it has room), and the third level
    still finds the first level's slot of a through b."""
    config = SchedulerConfig(tools={"a": ToolLimits(concurrency=1)})
    with SyncScheduler(config) as scheduler:

        def third(attempt: Attempt) -> str:
            return "3"

        def second(attempt: Attempt) -> str:
            return "2>" + scheduler.submit(_call("a", level=3), third)

        def first(attempt: Attempt) -> str:
            return "1>" + scheduler.submit(_call("b", level=2), second)

        assert scheduler.submit(_call("a", level=1), first) == "1>2>3"

    async def main() -> str:
        scheduler = Scheduler(config)

        async def athird(attempt: Attempt) -> str:
            return "3"

        async def asecond(attempt: Attempt) -> str:
            return "2>" + await scheduler.submit(_call("a", level=3), athird)

        async def afirst(attempt: Attempt) -> str:
            return "1>" + await scheduler.submit(_call("b", level=2), asecond)

        try:
            async with asyncio.timeout(5):
                return await scheduler.submit(_call("a", level=1), afirst)
        finally:
            await scheduler.aclose()

    assert asyncio.run(main()) == "1>2>3"


def test_with_a_store_a_nested_call_of_its_parents_tool_runs_under_its_lease_even_with_local_room(
    store: Store,
) -> None:
    """Limit 2 across processes: another process holds one lease, the parent the other. The
    nested call to the same tool has local room (1 of 2), so before it took a local slot and
    polled for a third lease until its deadline; now it runs under its parent's tool slot and lease."""
    config = SchedulerConfig(tools={"a": ToolLimits(concurrency=2)})
    other_process = LeaseManager(store, ttl_s=10.0)
    held = other_process.try_acquire("tool:a", 2)
    assert held is not None

    async def main() -> str:
        scheduler = Scheduler(config, store=store)

        async def child(attempt: Attempt) -> str:
            return "child"

        async def parent(attempt: Attempt) -> str:
            return "parent+" + await scheduler.submit(_call("a", level=2), child)

        try:
            return await scheduler.submit(_call("a", level=1), parent)
        finally:
            await scheduler.aclose()

    try:
        assert asyncio.run(main()) == "parent+child"
    finally:
        other_process.release(held)
        other_process.close()


def test_async_running_attempt_is_restored_after_each_call_and_attempt() -> None:
    """The running attempt the async core marks for nested calls is put back as it was after
    every attempt (the core restores the value it read at admission): two nested calls in a row
    both run under the parent's slot at concurrency 1, a retried nested call's second attempt too,
    and outside any call nothing is marked, also after a call failed or was cancelled."""
    from agentgate.tasks import RetryPolicy
    from agentgate.tasks._waiter import RUNNING

    config = SchedulerConfig(
        tools={"a": ToolLimits(concurrency=1, retry=RetryPolicy(attempts=2, backoff_initial_s=0.0))},
    )

    async def main() -> None:
        scheduler = Scheduler(config)
        seen: list[object] = []
        failures = [1]

        async def flaky(attempt: Attempt) -> str:
            if failures:
                failures.pop()
                raise ConnectionRefusedError("first attempt")  # transient: retried
            return f"inner{attempt.number}"

        async def parent(attempt: Attempt) -> list[str]:
            mine = RUNNING.get()
            first = await scheduler.submit(_call("a", level=2), flaky)
            seen.append(RUNNING.get() is mine)
            second = await scheduler.submit(_call("a", level=3), lambda _: asyncio.sleep(0, "inner"))
            seen.append(RUNNING.get() is mine)
            return [first, second]

        assert RUNNING.get() is None
        assert await scheduler.submit(_call("a", level=1), parent) == ["inner2", "inner"]
        assert seen == [True, True]
        assert RUNNING.get() is None

        async def fails(_attempt: Attempt) -> None:
            raise ValueError("not retried")

        with pytest.raises(ValueError):
            await scheduler.submit(_call("a"), fails)
        assert RUNNING.get() is None
        started = asyncio.Event()

        async def hangs(_attempt: Attempt) -> None:
            started.set()
            await asyncio.sleep(60)

        task = asyncio.ensure_future(scheduler.submit(_call("a"), hangs))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert RUNNING.get() is None
        assert scheduler.in_flight == 0
        await scheduler.aclose()

    asyncio.run(main())


def test_a_nested_call_that_waits_queues_at_its_parents_more_urgent_class() -> None:
    """Review R54: a nested call queued at its own class (the default one, less urgent than its
    parent's): while its parent held tool x's slot waiting for it, every urgent call to y that
    came later started first (priority inversion), and under a steady urgent load the parent
    never finished. It queues at the most urgent class of itself and its ancestors."""
    config = SchedulerConfig(
        priority_classes=(PriorityClass("urgent", 0), PriorityClass("batch", 1)),
        default_priority="batch",
        tools={"x": ToolLimits(concurrency=1), "y": ToolLimits(concurrency=1)},
    )
    order: list[str | None] = []

    async def main() -> None:
        scheduler = Scheduler(config)
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold(attempt: Attempt) -> None:
            holding.set()
            await release.wait()

        async def record(attempt: Attempt) -> None:
            order.append(attempt.call.call_id)

        async def parent(attempt: Attempt) -> None:  # its nested call of y takes the default class
            await scheduler.submit(
                ToolCall("y", principal="p", call_id="nested", deadline=time.time() + 5), record
            )
            order.append("parent")

        async def queued(count: int) -> None:
            while scheduler.queued < count:
                await asyncio.sleep(0)

        deadline = time.time() + 5
        held = asyncio.create_task(scheduler.submit(ToolCall("y", principal="u", deadline=deadline), hold))
        await holding.wait()
        urgent = ToolCall("x", priority="urgent", principal="p", deadline=deadline)
        tasks = [held, asyncio.create_task(scheduler.submit(urgent, parent))]
        async with asyncio.timeout(5):
            await queued(1)  # the nested call waits for y
            for number in range(3):
                later = ToolCall(
                    "y", priority="urgent", principal="o", call_id=f"o{number}", deadline=deadline
                )
                tasks.append(asyncio.create_task(scheduler.submit(later, record)))
            await queued(4)
        release.set()
        await asyncio.gather(*tasks)
        await scheduler.aclose()

    asyncio.run(main())
    assert order == ["nested", "parent", "o0", "o1", "o2"]


def test_nested_siblings_that_wait_for_the_lent_slot_start_in_arrival_order() -> None:
    """Review R54: nested calls waiting for their parent's lent slot were kept in a set and
    started in the order of their hashes (n0, n6, n11, n1, ...), breaking "within one agent,
    calls to the same tool start in arrival order"; they start in the order they came."""
    config = SchedulerConfig(tools={"x": ToolLimits(concurrency=1)})
    order: list[str | None] = []

    async def main() -> None:
        scheduler = Scheduler(config)

        async def leaf(attempt: Attempt) -> None:
            order.append(attempt.call.call_id)
            await asyncio.sleep(0)

        async def parent(attempt: Attempt) -> None:
            deadline = time.time() + 5
            siblings = [ToolCall("x", call_id=f"n{number}", deadline=deadline) for number in range(12)]
            await asyncio.gather(*(scheduler.submit(call, leaf) for call in siblings))

        await scheduler.submit(ToolCall("x", deadline=time.time() + 5), parent)
        await scheduler.aclose()

    asyncio.run(main())
    assert order == [f"n{number}" for number in range(12)]
