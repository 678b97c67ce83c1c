"""Regression review of R91: the router built the backends of a line in the order of their names,
not of the inventory.

The engines a waiter may use are a set; when two engine keys fall in one slot of the set's table
its order is the order they were added in, and the walk down the line tries the engines in that
order. Built from sorted names, the engine each waiter was given (and the order ``due`` named
them in) changed with how the backends were named, and with the hash seed; the router before
R91 added them in inventory order. They are added in inventory order again.

Rule: renaming backends changes neither which waiters the free slots go to, nor which engine
each is given, nor the order ``due`` names them in.
"""

from __future__ import annotations

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.router import Router, RouteRequest

FIRST = "http://127.0.0.1:9000"


def _engine(url: str) -> str:
    """The engine key of a backend at ``url``."""
    inventory = inventory_from_mapping({"backends": [{"name": "b", "url": url, "models": ["m"]}]})
    return inventory.backends[0].engine_key


def _in_order(*urls: str) -> list[str]:
    """The engine keys of backends at ``urls`` as a set added to in that order iterates them."""
    keys = set()
    for url in urls:
        keys.add(_engine(url))
    return list(keys)


def _colliding_url() -> str:
    """A second engine whose key and the first one's iterate in the order they were added to a
    set (this process's hash seed: they fall in one slot of its table)."""
    for port in range(9001, 60_000):
        url = f"http://127.0.0.1:{port}"
        if _in_order(FIRST, url) != _in_order(url, FIRST):
            return url
    raise AssertionError("no engine key found whose order in a set follows the order added")


def _call(name: str) -> RouteRequest:
    return RouteRequest(id=name, model="m", prompt_tokens=10, slo_ttft_s=100.0, arrived_at=0.0)


def _due(first_name: str, second_name: str) -> list[str]:
    """``due`` once both slots free, with the inventory's first backend (on ``FIRST``) named
    ``first_name`` and its second (on an engine that shares its slot in a set) ``second_name``:
    the free slots in inventory order, each with the waiter given it."""
    second = _colliding_url()
    router = Router(
        inventory_from_mapping(
            {
                "backends": [
                    {"name": first_name, "url": FIRST, "models": ["m"], "max_concurrency": 1},
                    {"name": second_name, "url": second, "models": ["m"], "max_concurrency": 1},
                ]
            }
        )
    )
    actions = [router.route(_call(name), 0.0).action for name in ("h1", "h2", "w1", "w2")]
    assert actions == ["dispatch", "dispatch", "wait", "wait"]
    router.finished("h1", 0.1)
    router.finished("h2", 0.1)
    due = router.due(0.1)
    for name in due:  # each woken waiter is given a slot
        assert router.route(_call(name), 0.1).action == "dispatch"
    return due


def test_the_engine_each_waiter_is_given_does_not_depend_on_the_backends_names() -> None:
    # "z" then "a" sort the other way round from the inventory; "a" then "z" sort as listed.
    assert _due("z", "a") == _due("a", "z")
    assert sorted(_due("z", "a")) == ["w1", "w2"]
