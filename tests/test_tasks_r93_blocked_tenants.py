"""Review R93: a finish that frees only its tenant's slots walks only that tenant's calls.

With tenants held at their concurrency limit, each finish walked every tenant whose pass was
lower than the freed one's, blocked or not (about 5 ms per finish, under the lock, at 1,000
tenants). When neither the global slot nor the tool's held waiting calls back (and no tool with
calls waiting is rate limited), only the finishing tenant's calls can start, and the dispatch
looks up that tenant alone. The calls started, and their order, are the full walk's.
"""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from agentgate.tasks import SchedulerConfig, TenantShare, ToolCall, ToolLimits
from agentgate.tasks._config import PriorityClass, RateLimit
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


def _tenants_examined_per_finish(
    monkeypatch: pytest.MonkeyPatch, config: SchedulerConfig, tenants: int
) -> float:
    """Each of ``tenants`` tenants runs one call to ``x`` and has two waiting; every running call
    finishes in turn. The tenants examined (asked whether at their limit) per finish."""
    shared = SharedLimits(config)
    examined = 0
    blocked = shared._tenant_blocked

    def counted(tenant: str) -> bool:
        nonlocal examined
        examined += 1
        return blocked(tenant)

    monkeypatch.setattr(shared, "_tenant_blocked", counted)
    try:
        with shared.lock:
            calls = [
                [_submit(shared, ToolCall("x", tenant=f"t{i}", principal="p")) for _ in range(3)]
                for i in range(tenants)
            ]
            assert all(waiters[0].granted and not waiters[1].granted for waiters in calls)
            examined = 0
            for turn in range(2):
                for waiters in calls:
                    shared.finish(waiters[turn])
                    assert waiters[turn + 1].granted  # the freed tenant's next call started
        return examined / (2 * tenants)
    finally:
        shared.close()


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


def _started_order(config: SchedulerConfig, seed: int, full_walk: bool) -> list[int]:
    """Random arrivals and finishes; the numbers of the calls in the order they started."""
    rnd = random.Random(seed)
    shared = SharedLimits(config)
    if full_walk:
        walk = shared._dispatch_queue
        shared._dispatch_queue = lambda tool, only_tenant=None: walk(tool)  # type: ignore[method-assign]
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
                        rnd.choice("xyz"),
                        tenant=rnd.choice(["a", "b", "c", "d", "e"]),
                        principal=rnd.choice("pqr"),
                    )
                    numbers[id(call)] = len(waiters)
                    waiters.append(_submit(shared, call, rnd.choice(classes)))
        assert len(order) > 100
        return order
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
    assert _started_order(config, seed, full_walk=False) == _started_order(config, seed, full_walk=True)
