"""Regression review of R91: a waiter that stopped asking kept its place in line.

The router before review R91 walked the line from its head at every ask and every ``due`` until
the free slots were spoken for, and withdrew every waiter it passed that had not asked for
``WAITER_TIMEOUT_S`` (its caller gave up); asking again, such a caller was queued anew, behind
those that kept asking. Review R91's walk looked only at the waiters that might use a free slot,
so one that stopped asking kept its place until the once-a-second sweep, and asking again before
it took a slot from a waiter that never stopped. The walk now withdraws every waiter gone from
the part of the line it covers, as the walk down the whole line did (found through a heap of the
waiters by when they last asked, not by looking at each).

Rules: the slots, the ``due`` lists, the refusals and the waiters kept in line are those of a
walk down the whole line; in particular a waiter that stopped asking loses its place once an ask
or a ``due`` passes it, and asking again it is behind those that kept asking.
"""

from __future__ import annotations

import random

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.inventory import Backend, Inventory
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import (
    WAITER_TIMEOUT_S,
    AllowedBackend,
    Router,
    RouteRequest,
    _place,
)
from agentgate.errors import NoBackend


def _call(name: str, model: str, *, arrived: float = 0.0) -> RouteRequest:
    return RouteRequest(id=name, model=model, prompt_tokens=10, slo_ttft_s=100.0, arrived_at=arrived)


def test_a_waiter_that_stopped_asking_is_behind_those_that_kept_asking() -> None:
    router = Router(
        inventory_from_mapping(
            {
                "backends": [
                    {"name": "b0", "url": "http://127.0.0.1:9000", "models": ["m"], "max_concurrency": 1},
                    {"name": "b1", "url": "http://127.0.0.1:9001", "models": ["n"], "max_concurrency": 1},
                ]
            }
        )
    )
    assert router.route(_call("A", "m"), 0.0).action == "dispatch"
    for now in (0.0, 0.9):
        assert router.route(_call("W1", "m"), now).action == "wait"
        assert router.route(_call("W2", "m"), now).action == "wait"
    assert router.route(_call("X", "n"), 1.05).action == "dispatch"  # the sweep: nobody gone yet
    assert router.route(_call("W2", "m"), 1.95).action == "wait"  # W2 keeps asking, W1 does not
    router.finished("X", 1.95)
    # A call of the other model walks past W1's place: W1 has not asked for 1.1 s.
    assert router.route(_call("Y", "n"), 2.0).action == "dispatch"
    assert sorted(router._waiters) == ["W2"]
    assert router.route(_call("W1", "m"), 2.02).action == "wait"  # asks again: behind W2
    router.finished("A", 2.03)
    assert router.due(2.03) == ["W2"]
    assert router.route(_call("W1", "m"), 2.04).action == "wait"
    assert router.route(_call("W2", "m"), 2.04).backend == "b0"


class _WholeLine(Router):
    """The rule as the router before review R91 applied it: at each ask and ``due``, walk the
    whole line from its head, withdrawing the waiters gone, until the free slots are given."""

    def _match(
        self, key: tuple[float, float, float], now: float
    ) -> tuple[dict[str, list[str]], dict[str, set[str]], dict[str, int]]:
        if now - self._swept > WAITER_TIMEOUT_S:
            self._swept = now
            for name, waiter in list(self._waiters.items()):
                if self._gone(waiter, now):
                    self.withdraw(name)
        spare = self._spare()
        given: dict[str, list[str]] = {url: [] for url in spare}
        usable: dict[str, set[str]] = {}
        for name in sorted(self._waiters, key=lambda name: self._waiters[name].key):
            waiter = self._waiters[name]
            if waiter.key >= key or not any(n > len(given[url]) for url, n in spare.items()):
                break
            if self._gone(waiter, now):
                self.withdraw(name)
                continue
            if self._in_debt(waiter.tenant, waiter.cost, now, paid=waiter.paid):
                continue
            usable[name] = {
                url
                for backend in waiter.backends
                if (url := self.states[backend].backend.engine_key) in spare and self.states[backend].healthy
            }
            _place(name, usable, given, spare, set())
        return given, usable, spare


def _inventory(rng: random.Random) -> Inventory:
    engines = rng.randint(2, 6)
    return inventory_from_mapping(
        {
            "backends": [
                {
                    "name": f"b{i}",
                    "url": f"http://127.0.0.1:{9000 + rng.randrange(engines)}",
                    "models": rng.sample(["m", "n", "o"], rng.randint(1, 2)),
                    "max_concurrency": rng.randint(1, 2),
                }
                for i in range(rng.randint(3, 9))
            ]
        }
    )


def _within(names: frozenset[str]) -> AllowedBackend:
    def allowed(backend: Backend) -> bool:
        return backend.name in names

    return allowed


def _scenario(seed: int, steps: int = 160) -> None:
    """Random calls, re-asks (some after more than ``WAITER_TIMEOUT_S``), finished calls,
    withdrawals, backends down and up, and ``due``, on the router and on ``_WholeLine``."""
    rng = random.Random(seed)
    inventory = _inventory(rng)
    names = [backend.name for backend in inventory.backends]
    quotas = {"t1": TenantQuota(rate_tokens_per_s=50.0, burst_tokens=600.0)} if rng.random() < 0.5 else None
    routers = [Router(inventory, quotas=quotas), _WholeLine(inventory, quotas=quotas)]
    predicates: list[AllowedBackend | None] = [None]
    predicates += [_within(frozenset(rng.sample(names, rng.randint(1, len(names))))) for _ in range(3)]
    calls: dict[str, tuple[RouteRequest, AllowedBackend | None]] = {}
    dispatched: list[str] = []
    now = 0.0
    for step in range(steps):
        roll = rng.random()
        if roll < 0.1:
            now += rng.choice([0.01, 0.1, 0.5]) + rng.choice([0.0, 0.0, 1.2, 2.5])
            continue
        if roll < 0.45 or not calls:
            request = RouteRequest(
                id=f"r{step}",
                model=rng.choice(["m", "n", "o"]),
                prompt_tokens=rng.choice([10, 100]),
                priority=rng.choice([0, 1, 1, 1]),
                slo_ttft_s=rng.choice([1.0, 5.0, 100.0]),
                arrived_at=now - rng.choice([0.0, 0.0, 0.1]),
                tenant=rng.choice(["t1", "t2"]),
            )
            calls[request.id] = (request, rng.choice(predicates))
            op: tuple[str, ...] = ("route", request.id)
        elif roll < 0.65:
            op = ("route", rng.choice(list(calls)))
        elif roll < 0.8 and dispatched:
            op = ("finished", dispatched.pop(rng.randrange(len(dispatched))))
        elif roll < 0.85:
            op = ("withdraw", rng.choice(list(calls)))
        elif roll < 0.9:
            op = (rng.choice(["mark_down", "mark_up"]), rng.choice(names))
        else:
            op = ("due",)
        results: list[object] = []
        for router in routers:
            try:
                if op[0] == "route":
                    request, allowed = calls[op[1]]
                    plan = router.route(request, now, allowed)
                    results.append((plan.action, plan.backend, plan.reason))
                elif op[0] == "finished":
                    results.append(router.finished(op[1], now))
                elif op[0] == "withdraw":
                    results.append(router.withdraw(op[1]))
                elif op[0] == "due":
                    results.append(router.due(now))
                else:
                    results.append(getattr(router, op[0])(op[1]))
            except NoBackend as refused:
                results.append(("refused", str(refused)))
        context = (seed, step, now, op)
        assert results[0] == results[1], context
        assert list(routers[0]._waiters) == list(routers[1]._waiters), context
        if op[0] == "route" and results[0][0] == "dispatch":  # type: ignore[index]
            dispatched.append(op[1])
            del calls[op[1]]
        elif op[0] == "route" and results[0][0] == "refused":  # type: ignore[index]
            del calls[op[1]]


@pytest.mark.parametrize("seeds", [range(start, start + 25) for start in range(0, 200, 25)])
def test_the_line_is_that_of_a_walk_down_the_whole_line(seeds: range) -> None:
    for seed in seeds:
        _scenario(seed)
