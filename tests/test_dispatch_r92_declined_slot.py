"""A waiter that turns down the free slot offered to it does not keep it from the next in line.

Until review R92 a class-1 waiter whose SLO no free slot could meet (``choose``: "SLO unmet
anywhere; class 1 waits") kept its place in line and with it the slot: every walk down the line
gave it the slot it had just turned down, the next waiter (whose SLO the slot met) was told to
wait, ``due`` named only the one that turned it down, and the slot stayed idle until that one was
shed. Now the one that turned the slot down is passed over until it asks again (then it is offered
a slot at its arrival's place again), and the dispatcher wakes the next in line to take it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_router_order import one_slot, req

from agentgate.dispatch import Dispatcher
from agentgate.dispatch import dispatcher as dispatcher_module
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.dispatch.scorers import Scorer
from agentgate.dispatch.state import BackendState
from agentgate.sim import SimServer


class SlowFor(Scorer):
    """Predicts ``seconds`` to first token for the requests named in ``slow``, else none."""

    def __init__(self, seconds: float, *slow: str) -> None:
        self.seconds = seconds
        self.slow = set(slow)

    def __call__(self, state: BackendState, request: RouteRequest, now: float) -> float:
        return self.seconds if request.id in self.slow else 0.0


def line_of_two(predictor: SlowFor) -> Router:
    """One slot, held; A (SLO 3.2 s) then B (SLO 100 s) in line for it; the slot then frees."""
    router = Router(one_slot(), predictor=predictor)
    assert router.route(req("holder", 0, 0.0), 0.0).action == "dispatch"
    assert router.route(req("A", 1, 0.0, slo=3.2), 0.0).until_freed
    assert router.route(req("B", 1, 0.1, slo=100.0), 0.1).until_freed
    router.finished("holder", 0.5)
    return router


def test_the_slot_a_waiter_turns_down_goes_to_the_next_in_line() -> None:
    router = line_of_two(SlowFor(3.0, "A"))
    assert router.due(0.5) == ["A"]
    declined = router.route(req("A", 1, 0.0, slo=3.2), 0.5)
    assert declined.action == "wait" and not declined.until_freed  # its SLO is met nowhere
    assert router.due(0.5) == ["B"]
    assert router.route(req("B", 1, 0.1, slo=100.0), 0.5).action == "dispatch"


def test_asking_again_it_is_offered_a_slot_at_its_arrivals_place() -> None:
    predictor = SlowFor(3.0, "A")
    router = line_of_two(predictor)
    assert not router.route(req("A", 1, 0.0, slo=3.2), 0.5).until_freed
    predictor.slow.clear()  # the engine's queue drained: its SLO can be met now
    assert router.route(req("A", 1, 0.0, slo=3.2), 0.8).action == "dispatch"  # ahead of B
    assert router.route(req("B", 1, 0.1, slo=100.0), 0.8).until_freed


def test_asking_again_while_it_still_turns_the_slot_down_does_not_take_it_back() -> None:
    router = line_of_two(SlowFor(3.0, "A"))
    for now in (0.5, 0.7, 0.9):  # B, which asked at 0.1, is still in line
        assert not router.route(req("A", 1, 0.0, slo=3.2), now).until_freed
        assert router.due(now) == ["B"]
    assert router.route(req("B", 1, 0.1, slo=100.0), 0.9).action == "dispatch"


def test_the_dispatcher_wakes_the_next_in_line_when_a_waiter_turns_the_slot_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # B asks again only when woken (FREED_WAIT_S made longer than the test's bound): it gets the
    # slot that A turns down only if turning it down wakes it.
    monkeypatch.setattr(dispatcher_module, "FREED_WAIT_S", 60.0)

    async def scenario(url: str) -> str:
        inventory = one_slot(url, model="llama-3.1-8b")
        router = Router(inventory, predictor=SlowFor(100.0, "A"))
        async with Dispatcher(inventory, router) as dispatcher:

            async def call(name: str, slo: float) -> str:
                payload: dict[str, Any] = {
                    "model": "llama-3.1-8b",
                    "messages": [{"role": "user", "content": name}],
                    "max_tokens": 1,
                }
                await dispatcher.chat(payload, priority=1, slo_ttft_s=slo, request_id=name)
                return name

            now = dispatcher.clock()
            holder = RouteRequest(id="holder", model="llama-3.1-8b", prompt_tokens=1, arrived_at=now)
            assert router.route(holder, now).action == "dispatch"
            a = asyncio.create_task(call("A", 60.0))
            b = asyncio.create_task(call("B", 1000.0))
            while not {"A", "B"} <= set(dispatcher._waiting):
                await asyncio.sleep(0.01)  # both in line, waiting for a slot to free
            dispatcher._finished("holder")  # A is woken, turns the slot down, B takes it
            try:
                return await asyncio.wait_for(b, 10)
            finally:
                a.cancel()
                await asyncio.gather(a, return_exceptions=True)

    with SimServer(model_name="llama-3.1-8b", time_scale=0.01) as sim:
        assert asyncio.run(scenario(sim.url)) == "B"
