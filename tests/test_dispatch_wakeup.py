"""A call waiting for a slot (every backend at its max_concurrency) is woken when one frees.

It used to ask the router again every 20 ms (``SATURATED_POLL_S``) for as long as the backends
stayed saturated: 50 ``route()`` calls a second per waiter, and a freed slot could idle up to 20 ms.
The router decides the order of the line (tests/test_router_order.py); the dispatcher waits for a
slot to free (``RoutePlan.until_freed``), asking again at most every ``FREED_WAIT_S``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.router import RoutePlan, Router, RouteRequest
from agentgate.sim import SimServer


class CountingRouter(Router):
    asks: Counter[str]

    def route(self, request: RouteRequest, now: float, allowed: Any = None) -> RoutePlan:
        self.asks[request.id] += 1
        return super().route(request, now, allowed)


def test_a_waiter_is_woken_when_a_slot_frees_rather_than_polling() -> None:
    async def scenario(url: str) -> Counter[str]:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": url, "models": ["llama-3.1-8b"], "max_concurrency": 1}]}
        )
        router = CountingRouter(inventory)
        router.asks = Counter()
        async with Dispatcher(inventory, router) as dispatcher:

            async def call(name: str, tokens: int) -> None:
                payload = {
                    "model": "llama-3.1-8b",
                    "messages": [{"role": "user", "content": name}],
                    "max_tokens": tokens,
                }
                await dispatcher.chat(payload, priority=1, slo_ttft_s=30.0, request_id=name)

            holder = asyncio.create_task(call("holder", 60))  # about 0.6 s
            await asyncio.sleep(0.05)
            await asyncio.gather(holder, call("waiter", 3))
        return router.asks

    with SimServer(model_name="llama-3.1-8b", time_scale=1.0) as sim:
        asks = asyncio.run(scenario(sim.url))
    # Asking every 20 ms, it asked about 30 times while the holder ran (0.6 s); now: at the
    # start, at most every FREED_WAIT_S (0.25 s) meanwhile, and once the slot freed.
    assert 2 <= asks["waiter"] <= 6, asks
