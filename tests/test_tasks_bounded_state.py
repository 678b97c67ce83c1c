"""What a long-running process keeps per caller-chosen key (tool names, tenants, request ids,
LangGraph thread ids, event loops) stays bounded. The scheduler (agentgate/tasks/_limits.py
``SharedLimits``, the schedulers' counts and fair queue) forgets idle per-name state past
``PER_NAME_STATE`` names, never a drained bucket nor a failing breaker: tools the config does not
name share one overflow breaker (``OVERFLOW_BREAKER``: its name reserved, shared across processes,
refusing retries once open) while a named tool or a key seen before the bound keeps its own. The
router's sessions and waiters, the dispatcher's in-flight accounting and a Gate's per-loop state
stay bounded too. Each test drives the real component with many distinct keys, then measures what
those keys filled (no timing, no RSS)."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentgate.capabilities import Call, canonical_resource
from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.router import WAITER_TIMEOUT_S, RouteRequest
from agentgate.errors import CapabilityError, CircuitOpen, DispatchError, InputError, PolicyError
from agentgate.gate import Gate
from agentgate.gate._config import scheduler_config
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore, open_store
from agentgate.store.leases import SharedBreakers
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._breaker import BreakerState
from agentgate.tasks._call import OVERFLOW_BREAKER, PER_NAME_STATE
from agentgate.tasks._config import BreakerPolicy, RateLimit, RetryPolicy, ToolLimits
from agentgate.tasks._failures import _DEAD_LETTERS_KEPT
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._metrics import _COLLECTORS, MAX_LABEL_VALUES, OTHER
from agentgate.tasks._token_bucket import TokenBucket

MANY = 20_000


async def _ok(_attempt: object) -> str:
    return "ok"


async def _aboom(_attempt: object) -> str:
    raise ConnectionError("down")


def _tools_in_events(events: dict[tuple[str, str], int]) -> set[str]:
    return {tool for _, tool in events}


def _series(registry: CollectorRegistry, family: str) -> list[dict[str, str]]:
    text = generate_latest(registry).decode()
    return [s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == family]


# --- the scheduler's counters ---------------------------------------------------------------------


async def test_the_async_schedulers_export_has_a_bounded_number_of_tool_series() -> None:
    """What holds: 3,000 distinct tool names make at most ``MAX_LABEL_VALUES`` + 1 series."""
    registry = CollectorRegistry()
    scheduler = Scheduler(SchedulerConfig(result_cache_size=0), registry=registry)
    try:
        for i in range(3 * MAX_LABEL_VALUES):
            assert await scheduler.submit(ToolCall(tool=f"gen.{i}"), _ok) == "ok"
        started = [labels for labels in _series(registry, "agentgate_tasks_events_total")]
    finally:
        await scheduler.aclose()
    assert len({labels["tool"] for labels in started}) <= MAX_LABEL_VALUES + 1
    assert any(labels["tool"] == OTHER for labels in started)


async def test_the_async_scheduler_keeps_counts_for_a_bounded_number_of_tools() -> None:
    """The module says "a scheduler keeps counts for at most that many names, so its memory is
    bounded too"; the sync scheduler does (below), the async one keeps one per name."""
    scheduler = Scheduler(SchedulerConfig(result_cache_size=0))
    try:
        for i in range(3 * MAX_LABEL_VALUES):
            assert await scheduler.submit(ToolCall(tool=f"gen.{i}"), _ok) == "ok"
        tools = _tools_in_events(scheduler.metrics.events)
    finally:
        await scheduler.aclose()
    assert len(tools) <= MAX_LABEL_VALUES + 1


def test_the_sync_scheduler_keeps_counts_for_a_bounded_number_of_tools() -> None:
    """What holds: the sync scheduler counts through ``tally``, bounded per tool name."""
    scheduler = SyncScheduler(SchedulerConfig(result_cache_size=0))
    try:
        for i in range(3 * MAX_LABEL_VALUES):
            assert scheduler.submit(ToolCall(tool=f"gen.{i}"), lambda _a: "ok") == "ok"
        tools = _tools_in_events(scheduler.scheduler.metrics.events)
    finally:
        scheduler.close()
    assert len(tools) <= MAX_LABEL_VALUES + 1


# --- the admission state ----------------------------------------------------------------------------


async def test_per_tool_and_per_tenant_admission_state_is_forgotten_once_idle() -> None:
    """20,000 calls, each its own tool and tenant, all succeeded: nothing is in flight, no breaker
    saw a failure, yet every tool name stays in three dicts."""
    scheduler = Scheduler(SchedulerConfig(result_cache_size=0))
    try:
        for i in range(MANY):
            call = ToolCall(tool=f"tool-{i}", tenant=f"tenant-{i}", principal=f"agent-{i}")
            assert await scheduler.submit(call, _ok) == "ok"
        shared = scheduler.shared
        sizes = {
            "breakers": len(shared.breakers),
            "tool_breakers": len(shared.tool_breakers),
            "limits_cache": len(shared.limits_cache),
        }
        # What is per call is already gone (pins the part that holds).
        assert not shared.tool_in_flight and not shared.tenant_in_flight and not shared.principal_in_flight
    finally:
        await scheduler.aclose()
    assert all(size <= MANY // 2 for size in sizes.values()), sizes


async def test_an_open_breaker_still_refuses_after_a_flood_of_other_tool_names() -> None:
    """The guard for the fix above: forgetting idle breakers must never forget an open one (that
    would let a failing tool be called again at once). Passes now; must keep passing."""
    config = SchedulerConfig(
        result_cache_size=0, breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=3600)
    )
    scheduler = Scheduler(config)

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), _aboom)
        for i in range(MANY):
            assert await scheduler.submit(ToolCall(tool=f"other-{i}", tenant=f"t-{i}"), _ok) == "ok"
        with pytest.raises(CircuitOpen):
            await scheduler.submit(ToolCall(tool="flaky"), _ok)
    finally:
        await scheduler.aclose()


async def _queue_in_waves(scheduler: Scheduler, tenants: int, wave: int) -> None:
    """Calls of ``tenants`` distinct tenants (each with its own agent) that all wait: in waves of
    ``wave`` behind a held slot (``max_concurrency=1``), each wave drained before the next."""
    for w in range(tenants // wave):
        release = asyncio.Event()

        async def hold(_attempt: object, release: asyncio.Event = release) -> str:
            await release.wait()
            return "held"

        held = asyncio.ensure_future(scheduler.submit(ToolCall(tool="hold"), hold))
        await asyncio.sleep(0)
        waiting = [
            asyncio.ensure_future(
                scheduler.submit(ToolCall(tool="x", tenant=f"t{w}-{i}", principal=f"a{i}"), _ok)
            )
            for i in range(wave)
        ]
        await asyncio.sleep(0)
        assert scheduler.queued == wave  # every one of them waited (entered the tree)
        release.set()
        assert await asyncio.gather(held, *waiting) == ["held"] + ["ok"] * wave


async def test_the_fair_queue_forgets_tenants_and_agents_that_waited_and_left() -> None:
    """What holds: 20,000 tenants queue in waves of 100; once drained, the queue's tree and its
    path cache hold about one wave, not all of them."""
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1, result_cache_size=0))
    wave = 100
    try:
        await _queue_in_waves(scheduler, MANY, wave)
        queue = scheduler.shared.queue
        nodes, stack = 0, list(queue._ranks.values())
        while stack:
            node = stack.pop()
            nodes += 1
            stack.extend(node.children.values())
        paths = len(queue._paths)
        assert queue.size == 0 and not queue.tenant_sizes and not queue.tool_sizes
    finally:
        await scheduler.aclose()
    assert nodes <= 8 * wave
    assert paths <= 8 * wave


async def test_the_tenant_shares_of_tenants_that_waited_and_left_are_forgotten() -> None:
    """5,000 tenants that each queued once: the fair queue forgets them (above), the share cache
    keeps every one."""
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1, result_cache_size=0))
    try:
        await _queue_in_waves(scheduler, 5_000, 100)
        shares = len(scheduler.shared.shares)
    finally:
        await scheduler.aclose()
    assert shares <= 2_500


async def test_per_call_state_is_gone_after_calls_that_succeed_fail_or_are_cancelled() -> None:
    """What holds: 6,000 calls, each its own run and call id (an idempotency key each): a third
    succeed, a third fail (not retried), a third are cancelled while they run. Afterwards the
    result cache is at its size, the dead letters at their cap, and no running twin, task or
    nested-call record is left."""
    scheduler = Scheduler(SchedulerConfig(result_cache_size=500))
    never = asyncio.Event()

    async def fails(_attempt: object) -> str:
        raise ValueError("no")

    async def hangs(_attempt: object) -> str:
        await never.wait()
        return "never"

    try:
        for i in range(2_000):
            assert await scheduler.submit(ToolCall(tool="t", run_id=f"run-{i}", call_id="ok"), _ok) == "ok"
            with pytest.raises(ValueError):
                await scheduler.submit(ToolCall(tool="t", run_id=f"run-{i}", call_id="fails"), fails)
            running = asyncio.ensure_future(
                scheduler.submit(ToolCall(tool="t", run_id=f"run-{i}", call_id="hangs"), hangs)
            )
            await asyncio.sleep(0)
            assert scheduler._twins  # the test's premise: it was running
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
        sizes = {
            "results": len(scheduler._results),
            "twins": len(scheduler._twins),
            "tasks": len(scheduler._tasks),
            "nested": len(scheduler._nested),
            "nested_waiting": len(scheduler.shared.nested_waiting),
            "in_flight": scheduler.in_flight,
        }
        dead = len(scheduler.dead_letters())
    finally:
        await scheduler.aclose()
    assert sizes == {"results": 500, "twins": 0, "tasks": 0, "nested": 0, "nested_waiting": 0, "in_flight": 0}
    assert 0 < dead <= _DEAD_LETTERS_KEPT


# --- idle token buckets and invented tools' breakers past PER_NAME_STATE --------------------------


async def test_token_buckets_of_idle_tools_are_forgotten_past_the_bound_and_a_drained_one_is_kept() -> None:
    """Every tool of a default rate has its bucket: past ``PER_NAME_STATE`` names the full ones
    (what a new bucket would be) are dropped, never one that still lacks tokens (a caller inventing
    tool names must not refill another tool's bucket)."""
    config = SchedulerConfig(
        result_cache_size=0, default_tool=ToolLimits(rate=RateLimit(per_second=0.001, burst=2))
    )
    scheduler = Scheduler(config)

    try:
        assert await scheduler.submit(ToolCall(tool="drained"), _ok) == "ok"  # one token of two left
        drained = scheduler.shared.buckets["drained"]
        for i in range(PER_NAME_STATE + 10):
            scheduler.shared.buckets[f"idle-{i}"] = TokenBucket(1000.0, 2)  # full
        assert await scheduler.submit(ToolCall(tool="new"), _ok) == "ok"
        assert len(scheduler.shared.buckets) == 2
        assert scheduler.shared.buckets["drained"] is drained and drained.level < 2
    finally:
        await scheduler.aclose()


def test_past_the_bound_invented_tools_share_one_breaker_and_a_named_tool_keeps_its_own() -> None:
    """Breakers are never dropped (a running call holds its own): past ``PER_NAME_STATE`` keys,
    tools the config does not name share ``OVERFLOW_BREAKER``, so a failing invented tool opens
    that one, never the breaker of a tool the config names, first seen after the flood."""
    config = SchedulerConfig(
        result_cache_size=0,
        tools={"pay": ToolLimits()},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=3600),
    )
    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        for i in range(PER_NAME_STATE):
            shared.breaker_for(ToolCall(tool=f"made-up-{i}"))
        late = [shared.breaker_for(ToolCall(tool=f"late-{i}")) for i in range(3)]
        assert {b.key for b in late} == {OVERFLOW_BREAKER} and len({id(b) for b in late}) == 1

        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), _boom)
        with pytest.raises(CircuitOpen):
            sync.submit(ToolCall(tool="late-1"), lambda _a: "ok")  # shares the open breaker
        assert sync.submit(ToolCall(tool="pay"), lambda _a: "ok") == "ok"  # named: its own
        assert shared.breaker_for(ToolCall(tool="pay")).key == "tool:pay"
        assert sync.submit(ToolCall(tool="made-up-0"), lambda _a: "ok") == "ok"  # seen before: its own
        assert len(shared.breakers) == PER_NAME_STATE + 2


# --- the breakers past PER_NAME_STATE (SharedLimits.breaker_for, OVERFLOW_BREAKER) ----------------
# A breaker key the config's ``tools`` does not name, first seen past the bound, shares one overflow
# breaker, never dropped, shared across processes through the store; the name ``_other`` is
# reserved; a named tool, or a key seen before the bound, keeps its own breaker; a flood of names
# neither resets nor orphans a failing tool's breaker, and a call's retries are refused once its
# breaker opened (sync and async).

_ONE_FAILURE = BreakerPolicy(failure_threshold=1, reset_timeout_s=3600)


def _boom(_attempt: object) -> str:
    raise ConnectionError("down")


def _flood(limits: SharedLimits, prefix: str = "made-up") -> None:
    for i in range(PER_NAME_STATE):
        limits.breaker_for(ToolCall(tool=f"{prefix}-{i}"))


def _fill_breakers(shared: SharedLimits) -> None:
    """Make idle breakers until ``shared`` holds ``PER_NAME_STATE`` (the next new key prunes)."""
    while len(shared.breakers) < PER_NAME_STATE:
        shared.breaker(f"idle-{len(shared.breakers)}")


def _threshold_two(attempts: int | None = None) -> SchedulerConfig:
    """A breaker that opens at the second failure and stays open; ``attempts``: each call's."""
    breaker = BreakerPolicy(failure_threshold=2, reset_timeout_s=3600)
    if attempts is None:
        return SchedulerConfig(result_cache_size=0, breaker=breaker)
    retry = RetryPolicy(attempts=attempts, backoff_initial_s=0, backoff_max_s=0)
    return SchedulerConfig(result_cache_size=0, breaker=breaker, default_tool=ToolLimits(retry=retry))


def _submit_in_thread(sync: SyncScheduler, fn: Any) -> tuple[threading.Thread, list[object]]:
    """Start a thread that submits ``fn`` as a ``flaky`` call; its list gets the result or the
    exception (the outcome is what the tests assert)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(sync.submit(ToolCall(tool="flaky"), fn))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


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

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("pay"), down)
        with pytest.raises(CircuitOpen) as named:
            await scheduler.submit(ToolCall("pay"), _ok)
        assert named.value.key == "tool:pay" and "shares" not in str(named.value)
        for i in range(PER_NAME_STATE):
            scheduler.shared.breaker_for(ToolCall(tool=f"made-up-{i}"))
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("late-0"), down)
        with pytest.raises(CircuitOpen) as shared:
            await scheduler.submit(ToolCall("late-1", breaker_key="backend:late"), _ok)
        assert shared.value.key == OVERFLOW_BREAKER
        assert "'late-1'" in str(shared.value) and "late-0" not in str(shared.value)
        # A named tool with a late key stays under its own (open) breaker, not the overflow's.
        with pytest.raises(CircuitOpen) as late:
            await scheduler.submit(ToolCall("pay", breaker_key="backend:late"), _ok)
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

    async def down(_attempt: object) -> str:
        raise ConnectionError("down")

    try:
        for scheduler in (first, second):
            _flood(scheduler.shared)
        with pytest.raises(ConnectionError):
            await first.submit(ToolCall("late-0"), down)
        await _stored(path, OVERFLOW_BREAKER, "open")
        with pytest.raises(CircuitOpen):  # adopted: the second process's own overflow never failed
            await second.submit(ToolCall("late-1"), _ok)
        assert await second.submit(ToolCall("pay"), _ok) == "ok"
        assert await second.submit(ToolCall("made-up-0"), _ok) == "ok"
        assert await first.submit(ToolCall("pay"), _ok) == "ok"
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
    config = _threshold_two()
    scheduler = Scheduler(config)

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), _aboom)
        for i in range(PER_NAME_STATE + 10):
            assert await scheduler.submit(ToolCall(tool=f"other-{i}"), _ok) == "ok"
        assert len(scheduler.shared.breakers) <= PER_NAME_STATE + 1  # the flood shares one breaker
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), _aboom)
        with pytest.raises(CircuitOpen):
            await scheduler.submit(ToolCall(tool="flaky"), _ok)
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

    try:
        running = asyncio.create_task(scheduler.submit(ToolCall(tool="flaky"), slow_boom))
        for _ in range(3):
            await asyncio.sleep(0)
        for i in range(PER_NAME_STATE + 10):  # names a caller invents while flaky's call runs
            assert await scheduler.submit(ToolCall(tool=f"other-{i}"), _ok) == "ok"
        release.set()
        with pytest.raises(ConnectionError):
            await running
        with pytest.raises(CircuitOpen):
            await scheduler.submit(ToolCall(tool="flaky"), _ok)
    finally:
        await scheduler.aclose()


def _fail_succeed_fail(flood: bool) -> BreakerState:
    """Under a threshold of 2: call A (running) then B fails, A succeeds, C fails; ``flood``: names
    invented while A runs drop A's idle breaker before B starts. The state of flaky's breaker."""
    config = _threshold_two()
    release, started = threading.Event(), threading.Event()

    def slow_ok(_attempt: object) -> str:
        started.set()
        assert release.wait(10)
        return "ok"

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
                _fill_breakers(shared)
                assert sync.submit(ToolCall(tool="invented"), lambda _a: "ok") == "ok"  # prunes
            with pytest.raises(ConnectionError):
                sync.submit(ToolCall(tool="flaky"), _boom)  # B: 1 failure of 2
        finally:
            release.set()
            running.join(10)
        assert results == ["ok"]  # A succeeded: the failures counted so far are reset
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="flaky"), _boom)  # C: 1 failure of 2 again
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
    config = _threshold_two(attempts=2)
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

    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        thread, outcome = _submit_in_thread(sync, a)
        try:
            assert started.wait(10)
            if flood:
                _fill_breakers(shared)
                assert sync.submit(ToolCall(tool="invented"), lambda _a: "ok") == "ok"  # prunes
            with pytest.raises(ConnectionError):
                sync.submit(ToolCall(tool="flaky"), _boom)
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
    config = _threshold_two(attempts=2)
    started, release = asyncio.Event(), asyncio.Event()
    ran: list[int] = []

    async def a(attempt: Any) -> str:
        ran.append(attempt.number)
        if attempt.number == 1:
            started.set()
            await release.wait()
            raise ConnectionRefusedError("down")
        return "ok"

    scheduler = Scheduler(config)
    try:
        shared = scheduler.shared
        task = asyncio.ensure_future(scheduler.submit(ToolCall(tool="flaky"), a))
        await started.wait()
        if flood:
            _fill_breakers(shared)
            assert await scheduler.submit(ToolCall(tool="invented"), _ok) == "ok"  # prunes
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), _aboom)
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
    config = _threshold_two(attempts=3)
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
        thread, outcome = _submit_in_thread(sync, a)
        try:
            assert started[0].wait(10)
            if flood:
                _fill_breakers(shared)
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
            assert await scheduler.submit(ToolCall(tool="t"), _ok) == "ok"
            sys.setprofile(hook)
            try:
                for _ in range(5):
                    assert await scheduler.submit(ToolCall(tool="t"), _ok) == "ok"
            finally:
                sys.setprofile(None)
        finally:
            await scheduler.aclose()

    asyncio.run(run_async())
    assert {"submit", "_run", "breaker_for"} <= seen  # the hook saw the calls
    assert not seen & {"record_success", "breaker"}


# --- the dispatcher's in-flight accounting ----------------------------------------------------------


async def test_two_calls_with_one_request_id_leave_no_backend_counted_busy() -> None:
    """Two calls in flight at once with one caller-chosen ``request_id``, one on each backend: the
    second's dispatch overwrote the first's in-flight record, so the first backend's ``prefilling``
    entry was never removed and it stays counted busy (a slot lost for good)."""
    model = "llama-3.1-8b"
    with SimServer(time_scale=0.05) as a, SimServer(time_scale=0.05) as b:
        inventory = inventory_from_mapping(
            {"backends": [{"name": n, "url": s.url, "models": [model]} for n, s in (("a", a), ("b", b))]}
        )
        router = Router(inventory)
        async with Dispatcher(inventory, router) as dispatcher:
            body = {"model": model, "messages": [{"role": "user", "content": "x " * 50}], "max_tokens": 3}
            results = await asyncio.gather(
                dispatcher.chat(body, request_id="dup", slo_ttft_s=10.0, allowed=lambda s: s.name == "a"),
                dispatcher.chat(body, request_id="dup", slo_ttft_s=10.0, allowed=lambda s: s.name == "b"),
                return_exceptions=True,
            )
            busy = {name: router.in_flight(name) for name in ("a", "b")}
    # Either fix will do: both calls answered, or the second refused as a duplicate (typed).
    answered = [r for r in results if not isinstance(r, BaseException)]
    assert answered and all(r.usage.completion_tokens == 3 for r in answered)
    assert all(
        isinstance(r, DispatchError) and "dup" in str(r) for r in results if isinstance(r, BaseException)
    )
    assert busy == {"a": 0, "b": 0}


# --- the router's per-session and per-waiter state --------------------------------------------------


def _one_slot_router(max_sessions: int = 100_000) -> Router:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9/b0", "models": ["m"], "max_concurrency": 1}]}
    )
    return Router(inventory, max_sessions=max_sessions)


def test_the_routers_session_affinity_keeps_at_most_max_sessions() -> None:
    """What holds: a session id per LangGraph thread (``Gate.dispatch`` passes it): 10,000
    threads leave ``max_sessions`` of them, and nothing in flight once each call ended."""
    router = _one_slot_router(max_sessions=500)
    for i in range(10_000):
        request = RouteRequest(
            id=f"s{i}", model="m", prompt_tokens=32, session=f"thread-{i}", arrived_at=float(i)
        )
        assert router.route(request, float(i)).action == "dispatch"
        router.finished(request.id, float(i))
    assert len(router._sessions) == 500
    assert not router._inflight and router.in_flight("b0") == 0


def test_waiters_that_stop_asking_leave_the_routers_line() -> None:
    """What holds: 10,000 calls told to wait for a slot whose callers vanish without withdrawing
    (a killed task, a direct router user) leave the line at the next call after
    ``WAITER_TIMEOUT_S``."""
    router = _one_slot_router()
    now = 1000.0
    held = RouteRequest(id="held", model="m", prompt_tokens=32, arrived_at=now)
    assert router.route(held, now).action == "dispatch"
    for i in range(10_000):
        request = RouteRequest(id=f"w{i}", model="m", prompt_tokens=32, arrived_at=now, slo_ttft_s=10.0)
        assert router.route(request, now).action == "wait"
    assert len(router._waiters) == 10_000  # the test's premise: they all waited
    later = now + 60 * WAITER_TIMEOUT_S
    router.finished("held", later)
    late = RouteRequest(id="late", model="m", prompt_tokens=32, arrived_at=later)
    assert router.route(late, later).action == "dispatch"
    assert not router._waiters and not router._queues
    assert not router._quiet and not router._overdue and not router._found


def test_waiters_that_come_and_go_while_no_slot_frees_leave_no_trace_in_the_router() -> None:
    """What holds: 10,000 calls that wait for a slot and are withdrawn (their callers cancelled)
    while no slot frees, so that no walk down the line runs, leave a few entries in the heaps the
    router finds waiters that stopped asking by, not one each; and the one that stays is still
    found when it stops asking."""
    router = _one_slot_router()
    assert router.route(RouteRequest(id="held", model="m", prompt_tokens=32), 0.0).action == "dispatch"
    stays = RouteRequest(id="stays", model="m", prompt_tokens=32, slo_ttft_s=100.0)
    assert router.route(stays, 0.0).action == "wait"
    for i in range(10_000):
        request = RouteRequest(id=f"w{i}", model="m", prompt_tokens=32, arrived_at=0.5, slo_ttft_s=100.0)
        assert router.route(request, 0.5).action == "wait"
        router.withdraw(request.id)
    assert list(router._waiters) == ["stays"] and [len(q) for q in router._queues.values()] == [1]
    assert len(router._quiet) + len(router._overdue) + len(router._found) <= 8 + 64
    router.finished("held", 3.0)  # "stays" last asked at 0.0: gone
    assert router.due(3.0) == []
    assert not router._waiters and not router._queues
    assert not router._quiet and not router._overdue and not router._found


# --- the Gate's per-event-loop state ----------------------------------------------------------------

ONE_TOOL = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  acme: {{}}
principals:
  bot: {{kind: agent, did: "{bot}", tenant: acme, roles: [r]}}
tools:
  t: {{args: {{}}}}
roles:
  r:
    kind: agent
    capabilities:
      - resource: "tool:t"
    ttl_s: 600
"""


def test_a_gate_used_from_a_new_event_loop_per_request_keeps_no_loop_behind(tmp_path: Path) -> None:
    """What holds: a service that runs ``asyncio.run`` per request makes a scheduler per loop;
    once each loop is gone, the gate keeps none of them (nor their metrics members, nor a count
    of runs per loop), and its admission state holds only the policy's one tool."""
    keys = {name: SigningKey.generate() for name in ("root", "bot")}
    policy = parse_policy(ONE_TOOL.format(root=keys["root"].did, bot=keys["bot"].did), source="one.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        bot = gate.issue(keys["root"], name="bot", key=keys["bot"], role="r")

        async def one(i: int) -> str:
            auth = gate.authorize(bot, Call.tool("t", {}), call_id=f"c{i}")

            async def tool() -> str:
                return "ok"

            return await gate.arun(auth, tool)

        for i in range(200):
            assert asyncio.run(one(i)) == "ok"
        gc.collect()
        collector = _COLLECTORS.get(gate.registry)
        assert len(gate._async_schedulers) <= 1
        assert (
            collector is not None and len(collector._members) <= 2
        )  # the sync scheduler's, at most one loop's
        assert not gate._loop_runs and not gate._outcome_refused_at
        limits = gate._limits
        assert limits is not None and set(limits.limits_cache) <= {"t"} and len(limits.breakers) <= 1
    finally:
        gate.close()
