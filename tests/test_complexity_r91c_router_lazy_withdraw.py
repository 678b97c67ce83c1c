"""A waiter leaving the line (``withdraw``, as every waiter dispatched does) no longer deletes its
entry from the sorted queue of every backend it may use, moving the rest of each list (as much
work as the line was long, in as many queues as backends: 656 us a withdraw with 100,000 waiting
each allowed 16 of 32 engines, against 25 us before review R91). It is left there dead, passed by
the walk, and the dead are dropped when they are half a queue or more: each withdraw costs about
a step per backend, and the slots still go in order of the line."""

from __future__ import annotations

import random

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.inventory import Backend
from agentgate.dispatch.router import AllowedBackend, Router, RouteRequest

ENGINES = 8


def _within(names: frozenset[str]) -> AllowedBackend:
    def allowed(backend: Backend) -> bool:
        return backend.name in names

    return allowed


def _call(name: str) -> RouteRequest:
    return RouteRequest(id=name, model="m", prompt_tokens=10, slo_ttft_s=1e9, arrived_at=0.0)


class _Counted(Router):
    compacted = 0

    def _compact(self, backend: str) -> None:
        _Counted.compacted += len(self._queues[backend]) - self._starts.get(backend, 0)
        super()._compact(backend)


def _full_router() -> tuple[_Counted, dict[str, AllowedBackend]]:
    inventory = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": f"e{i}",
                    "url": f"http://127.0.0.1:{9000 + i}",
                    "models": ["m"],
                    "max_concurrency": 1,
                }
                for i in range(ENGINES)
            ]
        }
    )
    router = _Counted(inventory)
    for i in range(ENGINES):
        assert router.route(_call(f"h{i}"), 0.0, _within(frozenset({f"e{i}"}))).backend == f"e{i}"
    rng = random.Random(5)
    rules = {}
    for i in range(400):
        rules[f"w{i}"] = _within(frozenset(f"e{k}" for k in rng.sample(range(ENGINES), ENGINES // 2)))
        assert router.route(_call(f"w{i}"), 0.0, rules[f"w{i}"]).action == "wait"
    return router, rules


def test_a_waiter_leaving_the_front_of_the_line_moves_no_queue() -> None:
    router, _ = _full_router()
    lengths = {name: len(queue) for name, queue in router._queues.items()}
    router.withdraw("w0")
    assert {name: len(queue) for name, queue in router._queues.items()} == lengths


def test_waiters_taking_the_slots_cost_a_bounded_number_of_steps_each_and_keep_the_order() -> None:
    router, rules = _full_router()
    _Counted.compacted = 0
    holders = [f"h{i}" for i in range(ENGINES)]
    order = [f"w{i}" for i in range(400)]
    for j in range(300):
        engine = j % ENGINES
        router.finished(holders[engine], 0.0)
        (name,) = router.due(0.0)
        # The slot goes to the first in line allowed there.
        first = next(
            w for w in order if w in router._waiters and rules[w](router.states[f"e{engine}"].backend)
        )
        assert name == first
        assert router.route(_call(name), 0.0, rules[name]).backend == f"e{engine}"
        holders[engine] = name
    assert len(router._waiters) == 100
    # Each queue holds at most twice its live waiters (and one), and the dead dropped cost, over
    # all withdraws, a few entries per backend each one left.
    for backend, queue in router._queues.items():
        live = sum(1 for w in router._waiters.values() if backend in w.backends)
        assert len(queue) - router._starts.get(backend, 0) <= 2 * live + 1
    assert _Counted.compacted <= 4 * 300 * (ENGINES // 2)
