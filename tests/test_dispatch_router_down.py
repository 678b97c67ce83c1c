"""The router's free slots (``Router._spare``) count only engines that can take work: the slots
of an engine marked down are no slots a waiter in line can be given."""

from __future__ import annotations

import pytest
from test_router_order import MODEL, req

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.router import Router, _Waiter


def _router() -> Router:
    return Router(
        inventory_from_mapping(
            {
                "backends": [
                    {"name": "up", "url": "http://127.0.0.1:9000", "models": [MODEL], "max_concurrency": 1},
                    {"name": "down", "url": "http://127.0.0.1:9001", "models": [MODEL], "max_concurrency": 8},
                ]
            }
        )
    )


def test_an_ask_walks_no_waiter_when_the_only_free_slots_are_on_an_engine_that_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R57: Router._spare counted a down engine's slots, so each ask walked the whole line for slots no waiter could get."""
    router = _router()
    router.mark_down("down")
    assert router.route(req("busy", 1, 0.0), 0.0).backend == "up"
    line = [req(f"w{n}", 1, 0.01 * (n + 1)) for n in range(20)]
    for waiter in line:
        assert router.route(waiter, waiter.arrived_at).action == "wait"
    walked = 0
    gone = Router._gone

    def counted(self: Router, waiter: _Waiter, now: float) -> bool:
        nonlocal walked
        walked += 1
        return gone(self, waiter, now)

    monkeypatch.setattr(Router, "_gone", counted)
    assert router.route(req("late", 1, 0.5), 0.5).action == "wait"
    assert router.due(0.5) == []
    assert walked == 0


def test_an_engine_back_up_counts_its_slots_again() -> None:
    router = _router()
    router.mark_down("down")
    assert router.route(req("busy", 1, 0.0), 0.0).backend == "up"
    assert router.route(req("w0", 1, 0.1), 0.1).action == "wait"
    router.mark_up("down")
    assert router._spare() == {router.states["down"].backend.engine_key: 8}
    assert router.due(0.2) == ["w0"]
    assert router.route(req("w0", 1, 0.1), 0.2).backend == "down"
