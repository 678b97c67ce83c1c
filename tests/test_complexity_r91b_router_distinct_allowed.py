"""Regression review of R91: the router's walk for slots cost a step for every set of backends its
waiters may use.

Review R91 kept the line as one line per set of backends its waiters may use and, at each ask and
each ``due``, built a heap head and the free engines of every such line with a backend on an
engine with a free slot. Where the waiters' ``allowed`` differ (32 engines, each waiter allowed a
random half of them) there are as many lines as waiters: 4.9 ms a freed slot at 1,000 waiting,
54 ms at 5,000, where the router before R91 took 0.3 ms. The line is now one queue per backend,
and the walk merges only the queues of backends with a free slot, visiting each waiter once.

Rules: the work of an ask or a ``due`` does not grow with the number of waiters, however many
sets of backends they may use; and the free slot goes to the first in line that may use it.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import agentgate.dispatch.router as router_module
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.router import Router, RouteRequest

ENGINES = 32
ROUTER_FILE = str(Path(router_module.__file__).resolve())


def _call(name: str, *, arrived: float = 0.0, priority: int = 1) -> RouteRequest:
    return RouteRequest(
        id=name, model="m", prompt_tokens=10, priority=priority, slo_ttft_s=100.0, arrived_at=arrived
    )


def _lines_run(work: Callable[[], None]) -> int:
    """How many lines of the router's module ``work`` runs (a measure of its work that does
    not depend on the machine's speed)."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if str(Path(frame.f_code.co_filename).resolve()) != ROUTER_FILE:
            return None
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def _freed_slot(waiting: int) -> tuple[int, list[str], str]:
    """Every engine held; ``waiting`` waiters each allowed a random half of them. A slot frees on
    ``b0``: the lines of the router run by ``due``, by the last waiter that may use ``b0`` asking
    (told to wait) and by the first one asking (given the slot); what ``due`` named, and the
    first waiter that may use ``b0``."""
    router = Router(
        inventory_from_mapping(
            {
                "backends": [
                    {
                        "name": f"b{i}",
                        "url": f"http://127.0.0.1:{9000 + i}",
                        "models": ["m"],
                        "max_concurrency": 1,
                    }
                    for i in range(ENGINES)
                ]
            }
        )
    )
    for i in range(ENGINES):
        plan = router.route(_call(f"h{i}"), 0.0, allowed=lambda b, n=f"b{i}": b.name == n)
        assert plan.backend == f"b{i}"
    rng = random.Random(7)
    allowed: dict[str, frozenset[str]] = {}
    for i in range(waiting):
        may = frozenset(f"b{k}" for k in rng.sample(range(ENGINES), ENGINES // 2))
        allowed[f"w{i}"] = may
        plan = router.route(
            _call(f"w{i}", arrived=0.001 * (i + 1)), 0.0, allowed=lambda b, m=may: b.name in m
        )
        assert plan.action == "wait"
    on_b0 = [name for name, may in allowed.items() if "b0" in may]
    first, last = on_b0[0], on_b0[-1]
    router.finished("h0", 0.1)
    due: list[str] = []

    def work() -> None:
        due.extend(router.due(0.1))
        for name, action in ((last, "wait"), (first, "dispatch")):
            request = _call(name, arrived=0.001 * (int(name[1:]) + 1))
            plan = router.route(request, 0.1, allowed=lambda b, m=allowed[name]: b.name in m)
            assert plan.action == action, (name, plan)

    return _lines_run(work), due, first


def test_a_freed_slot_costs_the_same_however_many_sets_of_backends_the_waiters_may_use() -> None:
    few_lines, few_due, few_first = _freed_slot(40)
    many_lines, many_due, many_first = _freed_slot(2000)
    assert few_due == [few_first] and many_due == [many_first] and few_first == many_first
    assert many_lines == few_lines
