"""Review R48 (bounds): what a long-running process keeps per caller-chosen key stays bounded.

A service that runs for weeks (a LangGraph app with the middleware, the gateway, a worker with a
scheduler) sees keys its callers choose: tool names and tenants (the scheduler's public API,
fed generated names), LangGraph thread ids (router sessions), request ids, event loops. Each test drives the real component
with many distinct keys and then looks at the size of the structure that key fills once the work
is done (no timing, no RSS).

Found and fixed by the lead (were strict xfails):

- ``Scheduler`` (async) counts every ``started`` event under the raw tool name on its fast path
  (``_scheduler.py``, the untraced branch writes ``metrics.events`` directly), bypassing the
  ``MAX_LABEL_VALUES`` admission that ``tally``/``event`` apply: one counter key per distinct tool,
  for the scheduler's life. The export is still folded at scrape, so only memory grows.
- ``SharedLimits`` keeps a ``CircuitBreaker`` (in ``breakers`` and ``tool_breakers``) and a
  ``limits_cache`` entry per distinct tool, forever (about 600 bytes per tool), also when every
  breaker is closed and healthy; and a ``shares`` entry per tenant that ever queued, forever,
  while the fair queue beside it forgets those tenants. (Reached through the scheduler's own API,
  which the metrics module expects to see "hostile or generated names"; a ``Gate`` passes only
  tools and tenants its policy declares, so the two findings above are bounded under a Gate.)
- ``Dispatcher``: the router's in-flight accounting is keyed by the request id, which a caller may
  choose (``request_id=``). Two calls in flight with one id on two backends leave the first
  backend counted busy forever (its ``prefilling`` entry is never removed): one leaked slot per
  duplicate, until a ``max_concurrency`` backend refuses everything. (The Gate and the gateway
  never pass ``request_id``: reached through the Dispatcher's own API; the GPU broker, by
  contrast, refuses an id already live.)

Pinned (hold): the async and sync schedulers' Prometheus export per tool, the sync scheduler's
counts, the fair queue's tree and path cache under 20,000 tenants, the result cache, dead letters
and per-call records after successes, failures and cancellations, the router's
session affinity map (``max_sessions``) and its line of waiters that stopped asking, and a Gate
used from a new event loop per request (no scheduler, metrics member or loop count kept).
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentgate.capabilities import Call
from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.router import WAITER_TIMEOUT_S, RouteRequest
from agentgate.errors import CircuitOpen, DispatchError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._config import BreakerPolicy
from agentgate.tasks._metrics import _COLLECTORS, MAX_LABEL_VALUES, OTHER
from agentgate.tasks._scheduler import _DEAD_LETTERS_KEPT

MANY = 20_000


async def _ok(_attempt: object) -> str:
    return "ok"


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

    async def boom(_attempt: object) -> str:
        raise ConnectionError("down")

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall(tool="flaky"), boom)
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
    assert not router._waiters and not router._line


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
