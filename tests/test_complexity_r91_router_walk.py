"""Review R91: the router's walk down the line for slots passed every waiter that could use none
of the free slots, and rebuilt the engines each may use from every backend.

With N calls waiting for a model whose engines were full, each call of another model (with room
on another engine) and each slot freed walked all N: 3.5 ms a call at 1,000 waiting, 33 ms at
8,000, on the event loop, for every tenant and model. The line is now kept per set of backends
its waiters may use, and the walk merges only the lines that may use a free slot, leaving a line
at its first waiter that can be given none.

Rules: how many waiters an ask or ``due`` looks at does not grow with the number of waiters that
can use none of the free slots; and the free slots still go to the first in line that may use
them (``due`` names the waiters that, with those ahead of them, can all be given a free slot on
an engine they may use), class 0 before class 1, then in order of arrival.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import Router, RouteRequest, _Waiter


class _Counting(Router):
    """A router that counts the waiters its walk down the line looks at (each is asked first
    whether its caller gave up)."""

    looked_at = 0

    def _gone(self, waiter: _Waiter, now: float) -> bool:
        self.looked_at += 1
        return super()._gone(waiter, now)


def _call(name: str, model: str, *, priority: int = 1, arrived: float = 0.0) -> RouteRequest:
    return RouteRequest(
        id=name, model=model, prompt_tokens=10, priority=priority, slo_ttft_s=100.0, arrived_at=arrived
    )


def _inventory(*backends: tuple[str, Sequence[str], int]) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {
                    "name": name,
                    "url": f"http://127.0.0.1:{9000 + i}",
                    "models": list(models),
                    "max_concurrency": cap,
                }
                for i, (name, models, cap) in enumerate(backends)
            ]
        }
    )


def _looked_at_per_small_call(waiting: int) -> int:
    router = _Counting(_inventory(("big0", ["big"], 1), ("small0", ["small"], 64)))
    assert router.route(_call("busy", "big"), 0.0).action == "dispatch"
    for i in range(waiting):
        assert router.route(_call(f"w{i}", "big"), 0.0).action == "wait"
    router.looked_at = 0
    for j in range(20):  # calls of the other model, each dispatched, finished, its slot freed
        assert router.route(_call(f"s{j}", "small"), 0.0).backend == "small0"
        router.finished(f"s{j}", 0.0)
        assert router.due(0.0) == []
    return router.looked_at


def test_waiters_for_a_full_model_cost_the_calls_of_another_model_nothing() -> None:
    assert _looked_at_per_small_call(2000) == _looked_at_per_small_call(20) == 0


def test_waiters_whose_allowed_rules_out_the_free_engine_are_not_walked() -> None:
    def looked_at(waiting: int) -> int:
        router = _Counting(_inventory(("a", ["m"], 1), ("b", ["m"], 64)))
        only_a = lambda backend: backend.name == "a"  # noqa: E731
        assert router.route(_call("busy", "m"), 0.0, allowed=only_a).backend == "a"
        for i in range(waiting):
            assert router.route(_call(f"w{i}", "m"), 0.0, allowed=only_a).action == "wait"
        router.looked_at = 0
        for j in range(20):
            assert router.route(_call(f"any{j}", "m", arrived=1.0), 0.0).backend == "b"
        return router.looked_at

    assert looked_at(2000) == looked_at(20) == 0


@pytest.mark.parametrize("waiting", [20, 2000])
def test_the_walk_leaves_a_line_at_its_first_waiter_given_no_slot(waiting: int) -> None:
    # One slot frees on "a" while "b" (another model, nobody waiting for it) has many: the first
    # waiter for "a" is given the slot; the next one can be given none, nor can any behind it.
    router = _Counting(_inventory(("a", ["m"], 1), ("b", ["other"], 64)))
    assert router.route(_call("busy", "m"), 0.0).action == "dispatch"
    for i in range(waiting):
        assert router.route(_call(f"w{i}", "m", arrived=0.001 * (i + 1)), 0.0).action == "wait"
    router.finished("busy", 0.1)
    router.looked_at = 0
    assert router.due(0.1) == ["w0"]
    assert router.looked_at <= 2
    assert router.route(_call(f"w{waiting - 1}", "m", arrived=0.001 * waiting), 0.1).action == "wait"
    assert router.route(_call("w0", "m", arrived=0.001), 0.1).backend == "a"


def _matchable(waiters: Sequence[frozenset[str]], free: dict[str, int]) -> bool:
    """Whether every waiter (the engines it may use) can be given its own free slot."""
    if not waiters:
        return True
    first, rest = waiters[0], waiters[1:]
    for engine in sorted(first):
        if free[engine] > 0:
            free[engine] -= 1
            fits = _matchable(rest, free)
            free[engine] += 1
            if fits:
                return True
    return False


@pytest.mark.parametrize("seed", range(150))
def test_free_slots_go_to_the_first_in_line_that_may_use_them(seed: int) -> None:
    rng = random.Random(seed)
    engines = {f"e{i}": (rng.sample(["m0", "m1"], rng.randint(1, 2)), rng.randint(1, 2)) for i in range(4)}
    router = Router(_inventory(*((name, models, cap) for name, (models, cap) in engines.items())))
    holders: list[str] = []
    for name, (models, cap) in engines.items():
        for k in range(cap):
            holder = f"hold-{name}-{k}"
            plan = router.route(_call(holder, models[0]), 0.0, allowed=lambda b, n=name: b.name == n)
            assert plan.backend == name
            holders.append(holder)
    line: list[tuple[tuple[int, float], RouteRequest, frozenset[str]]] = []
    for i in range(rng.randint(1, 14)):
        model = rng.choice(["m0", "m1"])
        serving = sorted(name for name, (models, _) in engines.items() if model in models)
        if not serving:
            continue
        may = frozenset(rng.sample(serving, rng.randint(1, len(serving))))
        request = _call(f"w{i}", model, priority=rng.choice([0, 1]), arrived=0.01 * (i + 1))
        assert router.route(request, 0.0, allowed=lambda b, m=may: b.name in m).action == "wait"
        line.append(((request.priority, request.arrived_at), request, may))
    line.sort(key=lambda entry: entry[0])
    for holder in rng.sample(holders, rng.randint(1, len(holders))):
        router.finished(holder, 0.1)
    free = {name: cap - router.in_flight(name) for name, (_, cap) in engines.items()}

    owed: list[frozenset[str]] = []
    due: set[str] = set()
    for _, request, may in line:
        if _matchable([*owed, may], free):
            owed.append(may)
            due.add(request.id)
    named = router.due(0.1)
    assert sorted(named) == sorted(due)
    for _, request, may in line:  # the others asking are told to wait: the slots are owed
        if request.id not in due:
            assert router.route(request, 0.1, allowed=lambda b, m=may: b.name in m).action == "wait"
