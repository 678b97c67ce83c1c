"""Review R93: a finish that frees only its tenant's (or agent's) slots walks only its calls.

With tenants held at their concurrency limit, each finish walked every tenant whose pass was
lower than the freed one's, blocked or not (about 5 ms per finish, under the lock, at 1,000
tenants). When neither the global slot nor the tool's held waiting calls back (and no tool with
calls waiting is rate limited), only the finishing tenant's calls can start, and the dispatch
looks up that tenant alone. The same one level down: with agents held at
``principal_concurrency``, a finish whose tenant had room before frees only its agent's slot,
and the dispatch looks up that agent alone (until then about 4.5 ms per finish at 1,000 agents of
one tenant). The calls started, and their order, are the full walk's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest
from prometheus_client import CollectorRegistry

from agentgate.tasks import SchedulerConfig, TenantShare, ToolCall, ToolLimits
from agentgate.tasks._config import PriorityClass, RateLimit
from agentgate.tasks._fair import AgentBlocked, Blocked
from agentgate.tasks._limits import SharedLimits
from agentgate.tasks._metrics import SchedulerMetrics
from agentgate.tasks._sync import _Wake
from agentgate.tasks._waiter import Waiter

DEFAULT = PriorityClass("default")
METRICS = SchedulerMetrics(CollectorRegistry(), queue_depth=dict, in_flight={}, breakers=list)


def _submit(shared: SharedLimits, call: ToolCall, priority: PriorityClass = DEFAULT) -> Waiter:
    """``call`` started at once, or queued (lock held)."""
    limits = shared.tool_limits(call.tool)
    waiter = shared.start_now(call, limits)
    if waiter is None:
        waiter = shared.enqueue(call, limits, priority, False, _Wake(), METRICS)
    return waiter


def _examined_per_finish(
    monkeypatch: pytest.MonkeyPatch, config: SchedulerConfig, tenant_of: Callable[[int], str], callers: int
) -> tuple[float, float]:
    """Each of ``callers`` agents (principal ``p<i>`` of tenant ``tenant_of(i)``) runs one call to
    ``x`` and has two waiting; every running call finishes in turn. The tenants and the agents the
    queue's walk examined (asked whether at their limit) per finish."""
    shared = SharedLimits(config)
    examined = {"tenants": 0, "agents": 0}
    pop = shared.queue.pop

    def counted(
        open_tools: set[str],
        tenant_blocked: Blocked | None,
        agent_blocked: AgentBlocked | None,
        *only: str | None,
    ) -> Waiter | None:
        assert tenant_blocked is not None and agent_blocked is not None

        def tenant_counted(tenant: str) -> bool:
            examined["tenants"] += 1
            return tenant_blocked(tenant)

        def agent_counted(tenant: str, agent: str) -> bool:
            examined["agents"] += 1
            return agent_blocked(tenant, agent)

        return pop(open_tools, tenant_counted, agent_counted, *only)

    monkeypatch.setattr(shared.queue, "pop", counted)
    try:
        with shared.lock:
            calls = [
                [_submit(shared, ToolCall("x", tenant=tenant_of(i), principal=f"p{i}")) for _ in range(3)]
                for i in range(callers)
            ]
            assert all(waiters[0].granted and not waiters[1].granted for waiters in calls)
            examined.update(tenants=0, agents=0)
            for turn in range(2):
                for waiters in calls:
                    shared.finish(waiters[turn])
                    assert waiters[turn + 1].granted  # the freed agent's next call started
        finishes = 2 * callers
        return examined["tenants"] / finishes, examined["agents"] / finishes
    finally:
        shared.close()


def _tenants_examined_per_finish(
    monkeypatch: pytest.MonkeyPatch, config: SchedulerConfig, tenants: int
) -> float:
    """One agent per tenant (see ``_examined_per_finish``): the tenants examined per finish."""
    return _examined_per_finish(monkeypatch, config, lambda i: f"t{i}", tenants)[0]


def _agents_examined_per_finish(
    monkeypatch: pytest.MonkeyPatch, config: SchedulerConfig, agents: int
) -> float:
    """``agents`` agents of one tenant (see ``_examined_per_finish``): the agents examined per finish."""
    return _examined_per_finish(monkeypatch, config, lambda i: "t", agents)[1]


def test_a_finish_freeing_its_tenant_examines_no_other_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    config = SchedulerConfig(tenant=TenantShare(concurrency=1), tools={"x": ToolLimits(concurrency=10_000)})
    # The tenant itself, and again once its next call took its slot (about tenants / 2 before R93).
    assert _tenants_examined_per_finish(monkeypatch, config, 300) <= 2


def test_with_a_rate_limited_tool_waiting_the_whole_queue_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token may have come since the last dispatch: the freed tenant alone is not enough."""
    config = SchedulerConfig(
        tenant=TenantShare(concurrency=1),
        tools={"x": ToolLimits(rate=RateLimit(per_second=1e6, burst=10**6))},
    )
    assert _tenants_examined_per_finish(monkeypatch, config, 40) > 5


def test_a_finish_freeing_its_agent_examines_no_other_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """One tenant (the common deployment), its agents held at ``principal_concurrency``."""
    config = SchedulerConfig(principal_concurrency=1, tools={"x": ToolLimits(concurrency=10_000)})
    # The agent itself, and again once its next call took its slot (about agents / 2 before).
    assert _agents_examined_per_finish(monkeypatch, config, 300) <= 2


def _started_order(
    config: SchedulerConfig,
    seed: int,
    full_walk: bool,
    tenants: Sequence[str] = "abcde",
    principals: Sequence[str] = "pqr",
) -> tuple[list[int], int]:
    """Random arrivals and finishes (of calls of ``tenants`` by ``principals``); the numbers of
    the calls in the order they started, and the dispatches narrowed to one agent."""
    rnd = random.Random(seed)
    shared = SharedLimits(config)
    walk = shared._dispatch_queue
    narrowed = 0

    def dispatch(tool: str | None, only_tenant: str | None = None, only_agent: str | None = None) -> None:
        nonlocal narrowed
        if full_walk:
            walk(tool)
        else:
            narrowed += only_agent is not None
            walk(tool, only_tenant, only_agent)

    shared._dispatch_queue = dispatch  # type: ignore[method-assign]
    numbers: dict[int, int] = {}  # id of a call -> its number
    order: list[int] = []
    start = shared.start

    def started(waiter: Waiter) -> None:
        order.append(numbers[id(waiter.call)])
        start(waiter)

    shared.start = started  # type: ignore[method-assign]
    classes = [PriorityClass("default"), PriorityClass("hi", weight=3.0), PriorityClass("low", rank=1)]
    waiters: list[Waiter] = []
    try:
        with shared.lock:
            for _ in range(400):
                running = [w for w in waiters if w.granted and not w.finished]
                if running and rnd.random() < 0.45:
                    shared.finish(rnd.choice(running))
                else:
                    call = ToolCall(
                        rnd.choice("xyz"), tenant=rnd.choice(tenants), principal=rnd.choice(principals)
                    )
                    numbers[id(call)] = len(waiters)
                    waiters.append(_submit(shared, call, rnd.choice(classes)))
        assert len(order) > 100
        return order, narrowed
    finally:
        shared.close()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "config",
    [
        SchedulerConfig(
            tenant=TenantShare(concurrency=2),
            tenants={"a": TenantShare(weight=3.0, concurrency=1), "b": TenantShare(weight=0.5)},
            tools={"x": ToolLimits(concurrency=3), "y": ToolLimits(concurrency=1)},
        ),
        SchedulerConfig(max_concurrency=5, principal_concurrency=1, tools={"z": ToolLimits(concurrency=2)}),
        SchedulerConfig(tenant=TenantShare(concurrency=1), principal_concurrency=1),
    ],
)
def test_calls_start_in_the_order_the_full_walk_gives(config: SchedulerConfig, seed: int) -> None:
    assert _started_order(config, seed, full_walk=False)[0] == _started_order(config, seed, full_walk=True)[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "config",
    [
        SchedulerConfig(
            principal_concurrency=1, tools={"x": ToolLimits(concurrency=30), "y": ToolLimits(concurrency=2)}
        ),
        SchedulerConfig(max_concurrency=12, principal_concurrency=2, tools={"z": ToolLimits(concurrency=3)}),
        SchedulerConfig(
            tenant=TenantShare(concurrency=4),
            tenants={"a": TenantShare(weight=2.0, concurrency=9)},
            principal_concurrency=1,
            tools={"y": ToolLimits(concurrency=5)},
        ),
    ],
)
@pytest.mark.parametrize("tenants", ["a", "ab"])
def test_with_agents_at_their_limit_calls_start_in_the_order_the_full_walk_gives(
    config: SchedulerConfig, tenants: str, seed: int
) -> None:
    """Many agents (a heap of them from 32 on) of one or two tenants, at ``principal_concurrency``
    and tenant, tool and global limits: the dispatches narrowed to one agent start what the full
    walk does."""
    principals = [f"p{i}" for i in range(40)]
    order, narrowed = _started_order(config, seed, False, tenants, principals)
    assert narrowed  # the narrowed walk was taken
    assert order == _started_order(config, seed, True, tenants, principals)[0]
