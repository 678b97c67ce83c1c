"""The scheduler's breakers past ``PER_NAME_STATE`` names (agentgate/tasks/_limits.py
``SharedLimits.breaker_for``, ``OVERFLOW_BREAKER`` of agentgate/tasks/_call.py).

A breaker key the config's ``tools`` does not name, first seen past the bound, shares one overflow
breaker, never dropped, shared across processes through the store; the name ``_other`` is
reserved; a named tool, or a key seen before the bound, keeps its own breaker; a flood of names
neither resets nor orphans a failing tool's breaker, and a call's retries are refused once its
breaker opened (sync and async).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agentgate.capabilities import canonical_resource
from agentgate.errors import CapabilityError, CircuitOpen, InputError, PolicyError
from agentgate.gate._config import scheduler_config
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store.leases import SharedBreakers
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._breaker import BreakerState
from agentgate.tasks._call import OVERFLOW_BREAKER
from agentgate.tasks._config import BreakerPolicy, RetryPolicy, ToolLimits
from agentgate.tasks._limits import PER_NAME_STATE, SharedLimits

_ONE_FAILURE = BreakerPolicy(failure_threshold=1, reset_timeout_s=3600)


def _boom(_attempt: object) -> str:
    raise ConnectionError("down")


def _flood(limits: SharedLimits, prefix: str = "made-up") -> None:
    for i in range(PER_NAME_STATE):
        limits.breaker_for(ToolCall(tool=f"{prefix}-{i}"))


# --- the reserved name ---------------------------------------------------------------------


def test_the_overflow_breakers_name_is_reserved_so_no_tool_shares_it() -> None:
    """Was a strict xfail (a tool named ``_other``, named by the config or seen before the flood,
    shared the overflow breaker ``tool:_other``): the name is now reserved, as the metrics'
    ``_other`` label already was, in the config, as a tool call's tool and as a breaker key."""
    with pytest.raises(InputError, match="_other"):
        SchedulerConfig(result_cache_size=0, tools={"_other": ToolLimits()})
    with pytest.raises(InputError, match="reserved"):
        ToolCall(tool="_other")
    with pytest.raises(InputError, match="reserved"):
        ToolCall(tool="x", breaker_key="tool:_other")


def test_a_gate_cannot_name_the_reserved_tool() -> None:
    """A Gate builds its ToolCall from a canonical policy resource: ``_other`` never is one, so
    the reservation cannot turn a call the Gate allowed into an InputError."""
    with pytest.raises(CapabilityError):
        canonical_resource("tool:_other")


# --- named tools and keys seen before the bound keep their own breaker ----------------------


def test_a_named_tool_with_a_late_breaker_key_is_not_refused_by_invented_tools() -> None:
    config = SchedulerConfig(result_cache_size=0, tools={"pay": ToolLimits()}, breaker=_ONE_FAILURE)
    with SyncScheduler(config) as sync:
        _flood(sync.scheduler.shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), _boom)
        assert sync.submit(ToolCall(tool="pay", breaker_key="backend:gpu"), lambda _a: "ok") == "ok"


def test_a_breaker_key_seen_before_the_bound_keeps_its_own_breaker() -> None:
    """An explicit key used before the flood is never moved to the overflow; one given later by
    an invented tool is (and so shares the invented tools' state, not a named tool's)."""
    config = SchedulerConfig(result_cache_size=0, tools={"pay": ToolLimits()}, breaker=_ONE_FAILURE)
    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        early = shared.breaker_for(ToolCall(tool="x", breaker_key="backend:early"))
        _flood(shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), _boom)
        assert shared.breaker_for(ToolCall(tool="y", breaker_key="backend:early")) is early
        assert sync.submit(ToolCall(tool="y", breaker_key="backend:early"), lambda _a: "ok") == "ok"
        assert sync.submit(ToolCall(tool="pay", breaker_key="tool:pay"), lambda _a: "ok") == "ok"
        with pytest.raises(CircuitOpen):
            sync.submit(ToolCall(tool="z", breaker_key="backend:late"), lambda _a: "ok")
        # One breaker per key: the overflow's key names one object only.
        assert (
            shared.breakers[OVERFLOW_BREAKER] is shared.breaker("tool:late-1") is shared.breaker("backend:x")
        )


def test_a_gates_config_names_every_policy_tool_so_none_reaches_the_overflow() -> None:
    """A Gate passes only policy tools, all of them in its scheduler config (named: never the
    overflow, however many); a policy cannot name a tool ``_other`` (not canonical), so a Gate
    never meets the overflow key's collision with a tool's."""
    with pytest.raises(PolicyError):
        parse_policy("version: 1\ntools:\n  _other: {idempotent: true}\n")
    names = ["search", "pay.charge", "a-b_c"]
    policy = parse_policy(
        "version: 1\ntools:\n" + "".join(f"  {json.dumps(n)}: {{idempotent: true}}\n" for n in names)
    )
    config = scheduler_config(policy)
    assert set(config.tools) == set(names)
    limits = SharedLimits(
        SchedulerConfig(tools={**{f"t{i}": ToolLimits() for i in range(PER_NAME_STATE + 8)}, **config.tools})
    )
    try:
        made = [limits.breaker_for(ToolCall(tool=f"t{i}")) for i in range(PER_NAME_STATE + 8)]
        assert OVERFLOW_BREAKER not in limits.breakers
        assert len({id(b) for b in made}) == PER_NAME_STATE + 8
        for name in names:
            assert limits.breaker_for(ToolCall(tool=name)).key == "tool:" + name
    finally:
        limits.close()


# --- the CircuitOpen of an overflow call ------------------------------------------------------


def test_a_circuit_open_under_the_overflow_leaks_no_other_tool_name() -> None:
    with SyncScheduler(SchedulerConfig(result_cache_size=0, breaker=_ONE_FAILURE)) as sync:
        _flood(sync.scheduler.shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="tenant-a-secret-tool"), _boom)
        with pytest.raises(CircuitOpen) as raised:
            sync.submit(ToolCall(tool="late-1", tenant="b"), lambda _a: "ok")
    assert raised.value.key == OVERFLOW_BREAKER
    assert "tenant-a-secret-tool" not in str(raised.value)


def test_a_circuit_open_under_the_overflow_names_the_tool_called() -> None:
    with SyncScheduler(SchedulerConfig(result_cache_size=0, breaker=_ONE_FAILURE)) as sync:
        _flood(sync.scheduler.shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), _boom)
        with pytest.raises(CircuitOpen) as raised:
            sync.submit(ToolCall(tool="late-1"), lambda _a: "ok")
    assert "late-1" in str(raised.value)


async def test_the_async_schedulers_circuit_open_names_the_tool_and_the_overflow_only_when_shared() -> None:
    """The sync path is pinned (above); the async one raises from two other places."""
    config = SchedulerConfig(
        result_cache_size=0,
        tools={"pay": ToolLimits()},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=3600),
    )
    scheduler = Scheduler(config)

    async def down(_attempt: object) -> str:
        raise ConnectionError("down")

    async def ok(_attempt: object) -> str:
        return "ok"

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("pay"), down)
        with pytest.raises(CircuitOpen) as named:
            await scheduler.submit(ToolCall("pay"), ok)
        assert named.value.key == "tool:pay" and "shares" not in str(named.value)
        for i in range(PER_NAME_STATE):
            scheduler.shared.breaker_for(ToolCall(tool=f"made-up-{i}"))
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("late-0"), down)
        with pytest.raises(CircuitOpen) as shared:
            await scheduler.submit(ToolCall("late-1", breaker_key="backend:late"), ok)
        assert shared.value.key == OVERFLOW_BREAKER
        assert "'late-1'" in str(shared.value) and "late-0" not in str(shared.value)
        # A named tool with a late key stays under its own (open) breaker, not the overflow's.
        with pytest.raises(CircuitOpen) as late:
            await scheduler.submit(ToolCall("pay", breaker_key="backend:late"), ok)
        assert late.value.key == "tool:pay" and "shares" not in str(late.value)
    finally:
        await scheduler.aclose()


# --- across processes (two schedulers with their own limits on one store) and metrics ---------


async def _stored(path: Path, key: str, state: str) -> None:
    store = open_store(str(path))
    try:
        deadline = time.monotonic() + 10
        while (found := SharedBreakers(store).read(key)) is None or found.state != state:
            assert time.monotonic() < deadline, f"{key} never became {state}"
            await asyncio.sleep(0.01)
    finally:
        store.close()


async def test_the_overflow_breaker_is_shared_across_processes_and_never_reaches_a_named_tool(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    stores = [open_store(str(path)), open_store(str(path))]
    config = SchedulerConfig(result_cache_size=0, tools={"pay": ToolLimits()}, breaker=_ONE_FAILURE)
    registry = CollectorRegistry()
    first = Scheduler(config, store=stores[0])
    second = Scheduler(config, store=stores[1], registry=registry)

    async def ok(_attempt: object) -> str:
        return "ok"

    async def down(_attempt: object) -> str:
        raise ConnectionError("down")

    try:
        for scheduler in (first, second):
            _flood(scheduler.shared)
        with pytest.raises(ConnectionError):
            await first.submit(ToolCall("late-0"), down)
        await _stored(path, OVERFLOW_BREAKER, "open")
        with pytest.raises(CircuitOpen):  # adopted: the second process's own overflow never failed
            await second.submit(ToolCall("late-1"), ok)
        assert await second.submit(ToolCall("pay"), ok) == "ok"
        assert await second.submit(ToolCall("made-up-0"), ok) == "ok"
        assert await first.submit(ToolCall("pay"), ok) == "ok"
        assert {b.key for b in SharedBreakers(stores[1]).all()} == {OVERFLOW_BREAKER}
        assert registry.get_sample_value("agentgate_tasks_breaker_state", {"key": OVERFLOW_BREAKER}) == 2
        assert registry.get_sample_value("agentgate_tasks_breaker_state", {"key": "tool:pay"}) in (0, None)
    finally:
        await first.aclose()
        await second.aclose()
        for store in stores:
            store.close()


# --- a failing tool's breaker through a flood of names ----------------------------------------


async def test_a_breaker_with_a_failure_counted_survives_a_flood_of_names() -> None:
    """A breaker one failure short of opening is kept past ``PER_NAME_STATE`` new tool names (they
    share one breaker): the next failure opens it (a flood of invented names cannot reset a
    failing tool's count)."""
    config = SchedulerConfig(
        result_cache_size=0, breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=3600)
    )
    scheduler = Scheduler(config)

    async def boom(_attempt: object) -> str:
        raise ConnectionError("down")

    async def ok(_attempt: object) -> str:
        return "ok"

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), boom)
        for i in range(PER_NAME_STATE + 10):
            assert await scheduler.submit(ToolCall(tool=f"other-{i}"), ok) == "ok"
        assert len(scheduler.shared.breakers) <= PER_NAME_STATE + 1  # the flood shares one breaker
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), boom)
        with pytest.raises(CircuitOpen):
            await scheduler.submit(ToolCall(tool="flaky"), ok)
    finally:
        await scheduler.aclose()


async def test_a_breaker_opened_by_a_call_in_flight_during_a_flood_still_refuses() -> None:
    config = SchedulerConfig(
        result_cache_size=0, breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=3600)
    )
    scheduler = Scheduler(config)
    release = asyncio.Event()

    async def slow_boom(_attempt: object) -> str:
        await release.wait()
        raise ConnectionError("down")

    async def ok(_attempt: object) -> str:
        return "ok"

    try:
        running = asyncio.create_task(scheduler.submit(ToolCall(tool="flaky"), slow_boom))
        for _ in range(3):
            await asyncio.sleep(0)
        for i in range(PER_NAME_STATE + 10):  # names a caller invents while flaky's call runs
            assert await scheduler.submit(ToolCall(tool=f"other-{i}"), ok) == "ok"
        release.set()
        with pytest.raises(ConnectionError):
            await running
        with pytest.raises(CircuitOpen):
            await scheduler.submit(ToolCall(tool="flaky"), ok)
    finally:
        await scheduler.aclose()


def _fail_succeed_fail(flood: bool) -> BreakerState:
    """Under a threshold of 2: call A (running) then B fails, A succeeds, C fails; ``flood``: names
    invented while A runs drop A's idle breaker before B starts. The state of flaky's breaker."""
    config = SchedulerConfig(
        result_cache_size=0, breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=3600)
    )
    release, started = threading.Event(), threading.Event()

    def slow_ok(_attempt: object) -> str:
        started.set()
        assert release.wait(10)
        return "ok"

    def boom(_attempt: object) -> str:
        raise ConnectionError("down")

    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        results: list[object] = []
        running = threading.Thread(
            target=lambda: results.append(sync.submit(ToolCall(tool="flaky"), slow_ok))
        )
        running.start()
        try:
            assert started.wait(10)
            if flood:
                while len(shared.breakers) < PER_NAME_STATE:
                    shared.breaker(f"idle-{len(shared.breakers)}")
                assert sync.submit(ToolCall(tool="invented"), lambda _a: "ok") == "ok"  # prunes
            with pytest.raises(ConnectionError):
                sync.submit(ToolCall(tool="flaky"), boom)  # B: 1 failure of 2
        finally:
            release.set()
            running.join(10)
        assert results == ["ok"]  # A succeeded: the failures counted so far are reset
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="flaky"), boom)  # C: 1 failure of 2 again
        return {s.key: s.state for s in shared.breaker_snapshots()}["tool:flaky"]


def test_fail_succeed_fail_leaves_the_breaker_closed_without_a_flood() -> None:
    assert _fail_succeed_fail(flood=False) is BreakerState.CLOSED


def test_a_success_under_a_dropped_breaker_resets_the_one_made_meanwhile() -> None:
    assert _fail_succeed_fail(flood=True) is BreakerState.CLOSED


# --- a call's retries under a breaker that opened ---------------------------------------------


def _retry_after_the_key_opened(flood: bool) -> tuple[object, list[int]]:
    """Threshold 2, two attempts. Call A's first attempt runs; (``flood``: names invented meanwhile
    drop A's idle breaker, and the next call makes a new one); call C fails (1 of 2); A's first
    attempt fails (2 of 2: the key's breaker opens). What A ends with, and the attempts it ran."""
    config = SchedulerConfig(
        result_cache_size=0,
        breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=3600),
        default_tool=ToolLimits(retry=RetryPolicy(attempts=2, backoff_initial_s=0, backoff_max_s=0)),
    )
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def a(attempt: object) -> str:
        number = attempt.number  # type: ignore[attr-defined]
        ran.append(number)
        if number == 1:
            started.set()
            assert release.wait(10)
            raise ConnectionRefusedError("down")  # transient: retried
        return "ok"

    def c(_attempt: object) -> str:
        raise ConnectionError("down")  # connection: counted, not retried

    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        outcome: list[object] = []

        def run_a() -> None:
            try:
                outcome.append(sync.submit(ToolCall(tool="flaky"), a))
            except Exception as exc:  # the outcome is what is asserted
                outcome.append(exc)

        thread = threading.Thread(target=run_a)
        thread.start()
        try:
            assert started.wait(10)
            if flood:
                while len(shared.breakers) < PER_NAME_STATE:
                    shared.breaker(f"idle-{len(shared.breakers)}")
                assert sync.submit(ToolCall(tool="invented"), lambda _a: "ok") == "ok"  # prunes
            with pytest.raises(ConnectionError):
                sync.submit(ToolCall(tool="flaky"), c)
        finally:
            release.set()
            thread.join(10)
        assert shared.breakers["tool:flaky"].state is BreakerState.OPEN
        return outcome[0], ran


def test_a_retry_is_refused_once_its_breaker_opened_without_a_flood() -> None:
    outcome, ran = _retry_after_the_key_opened(flood=False)
    assert isinstance(outcome, CircuitOpen), outcome
    assert ran == [1]


def test_a_retry_is_refused_once_its_breaker_opened_after_a_flood() -> None:
    outcome, ran = _retry_after_the_key_opened(flood=True)
    assert isinstance(outcome, CircuitOpen), outcome
    assert ran == [1]


async def _async_retry_after_the_key_opened(flood: bool) -> tuple[object, list[int]]:
    """As ``_retry_after_the_key_opened``, on the async scheduler (one loop, asyncio events)."""
    config = SchedulerConfig(
        result_cache_size=0,
        breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=3600),
        default_tool=ToolLimits(retry=RetryPolicy(attempts=2, backoff_initial_s=0, backoff_max_s=0)),
    )
    started, release = asyncio.Event(), asyncio.Event()
    ran: list[int] = []

    async def a(attempt: Any) -> str:
        ran.append(attempt.number)
        if attempt.number == 1:
            started.set()
            await release.wait()
            raise ConnectionRefusedError("down")
        return "ok"

    async def c(_attempt: object) -> str:
        raise ConnectionError("down")

    async def ok(_attempt: object) -> str:
        return "ok"

    scheduler = Scheduler(config)
    try:
        shared = scheduler.shared
        task = asyncio.ensure_future(scheduler.submit(ToolCall(tool="flaky"), a))
        await started.wait()
        if flood:
            while len(shared.breakers) < PER_NAME_STATE:
                shared.breaker(f"idle-{len(shared.breakers)}")
            assert await scheduler.submit(ToolCall(tool="invented"), ok) == "ok"  # prunes
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), c)
        release.set()
        outcome = (await asyncio.gather(task, return_exceptions=True))[0]
        assert shared.breakers["tool:flaky"].state is BreakerState.OPEN
        return outcome, ran
    finally:
        await scheduler.aclose()


def test_an_async_retry_is_refused_once_its_breaker_opened_without_a_flood() -> None:
    outcome, ran = asyncio.run(_async_retry_after_the_key_opened(flood=False))
    assert isinstance(outcome, CircuitOpen), outcome
    assert ran == [1]


def test_an_async_retry_is_refused_once_its_breaker_opened_after_a_flood() -> None:
    outcome, ran = asyncio.run(_async_retry_after_the_key_opened(flood=True))
    assert isinstance(outcome, CircuitOpen), outcome
    assert ran == [1]


def _fail_succeed_fail_within_one_call(flood: bool) -> tuple[object, list[int]]:
    """Threshold 2, three attempts. Call A's attempt 1 runs; (``flood``: A's idle breaker is
    dropped and call B makes a new one); A's attempt 1 fails; call C succeeds (the count is reset);
    A's attempt 2 fails: one failure since the success, so attempt 3 should run."""
    config = SchedulerConfig(
        result_cache_size=0,
        breaker=BreakerPolicy(failure_threshold=2, reset_timeout_s=3600),
        default_tool=ToolLimits(retry=RetryPolicy(attempts=3, backoff_initial_s=0, backoff_max_s=0)),
    )
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    ran: list[int] = []

    def a(attempt: Any) -> str:
        ran.append(attempt.number)
        if attempt.number <= 2:
            started[attempt.number - 1].set()
            assert release[attempt.number - 1].wait(10)
            raise ConnectionRefusedError("down")  # transient: counted and retried
        return "ok"

    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        outcome: list[object] = []

        def run_a() -> None:
            try:
                outcome.append(sync.submit(ToolCall(tool="flaky"), a))
            except Exception as exc:  # the outcome is what is asserted
                outcome.append(exc)

        thread = threading.Thread(target=run_a)
        thread.start()
        try:
            assert started[0].wait(10)
            if flood:
                while len(shared.breakers) < PER_NAME_STATE:
                    shared.breaker(f"idle-{len(shared.breakers)}")
                assert sync.submit(ToolCall(tool="invented"), lambda _a: "ok") == "ok"  # prunes
                assert sync.submit(ToolCall(tool="flaky"), lambda _a: "ok") == "ok"  # B: a new one
            release[0].set()
            assert started[1].wait(10)  # attempt 1 failed: 1 of 2
            assert sync.submit(ToolCall(tool="flaky"), lambda _a: "ok") == "ok"  # C: reset
        finally:
            release[0].set()
            release[1].set()
            thread.join(10)
        states = {s.key: s.state for s in shared.breaker_snapshots()}
        assert states["tool:flaky"] is BreakerState.CLOSED
        return outcome[0], ran


def test_fail_succeed_fail_within_one_call_lets_it_retry_without_a_flood() -> None:
    assert _fail_succeed_fail_within_one_call(flood=False) == ("ok", [1, 2, 3])


def test_fail_succeed_fail_within_one_call_lets_it_retry_after_a_flood() -> None:
    assert _fail_succeed_fail_within_one_call(flood=True) == ("ok", [1, 2, 3])


# --- the success path --------------------------------------------------------------------------


def test_a_success_under_a_healthy_breaker_calls_no_breaker_method() -> None:
    """The success path stays free of breaker work: with the breaker healthy, neither
    ``SharedLimits.breaker`` nor the breaker's own methods run for a call that succeeds, sync or
    async (the pruning and ``reconcile`` this once guarded are gone)."""
    seen: set[str] = set()

    def hook(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            seen.add(frame.f_code.co_name)

    async def ok(_attempt: object) -> str:
        return "ok"

    config = SchedulerConfig(result_cache_size=0)
    with SyncScheduler(config) as sync:
        assert sync.submit(ToolCall(tool="t"), lambda _a: "ok") == "ok"
        sys.setprofile(hook)
        try:
            for _ in range(5):
                assert sync.submit(ToolCall(tool="t"), lambda _a: "ok") == "ok"
        finally:
            sys.setprofile(None)

    async def run_async() -> None:
        scheduler = Scheduler(config)
        try:
            assert await scheduler.submit(ToolCall(tool="t"), ok) == "ok"
            sys.setprofile(hook)
            try:
                for _ in range(5):
                    assert await scheduler.submit(ToolCall(tool="t"), ok) == "ok"
            finally:
                sys.setprofile(None)
        finally:
            await scheduler.aclose()

    asyncio.run(run_async())
    assert {"submit", "_run", "breaker_for"} <= seen  # the hook saw the calls
    assert not seen & {"record_success", "breaker"}
