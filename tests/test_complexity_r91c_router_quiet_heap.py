"""A clock that keeps going backwards no longer grows the router's heap of when each waiter last
asked (``_quiet``) by one entry per ask: until a second regression review of R91 each ask earlier
than the waiter's entry pushed one more, and only a waiter leaving the line tidied them (100,000
asks of one waiter: 100,002 entries). Stale entries are now dropped once they outnumber the
waiters, and a waiter that stops asking still leaves the line."""

from __future__ import annotations

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.router import Router, RouteRequest


def _call(name: str) -> RouteRequest:
    return RouteRequest(id=name, model="m", prompt_tokens=10, slo_ttft_s=1e9, arrived_at=0.0)


def _router() -> Router:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9000", "models": ["m"], "max_concurrency": 1}]}
    )
    router = Router(inventory)
    assert router.route(_call("A"), 0.0).action == "dispatch"
    return router


def test_asks_on_a_clock_going_backwards_keep_the_heaps_bounded() -> None:
    router = _router()
    now = 1000.0
    assert router.route(_call("W"), now).action == "wait"
    for _ in range(2000):
        now -= 0.001
        assert router.route(_call("W"), now).action == "wait"
    assert len(router._quiet) + len(router._overdue) + len(router._found) <= 8 * len(router._waiters) + 64 + 1
    # The entry kept is of its last (earliest) ask: it is gone once silent for WAITER_TIMEOUT_S.
    assert router.due(now + 0.5) == []  # b0 still held
    router.finished("A", now + 2.0)
    assert router.due(now + 2.0) == []
    assert "W" not in router._waiters
