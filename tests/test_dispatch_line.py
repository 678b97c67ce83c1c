"""The dispatcher and the router's line (found by review r12): a call cancelled while it waited for
a slot stayed in the line for WAITER_TIMEOUT_S (1 s), holding the slot that freed for it from the
waiters behind (the dispatcher now withdraws it); and every freed slot woke every waiting call,
each asking the router again (the dispatcher now wakes only those ``router.due`` names)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import agentgate.dispatch.dispatcher as dispatcher_module
import agentgate.dispatch.router as router_module
from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.router import Router
from agentgate.sim import SimServer


def _in_line(router: Router) -> list[str]:
    """The waiters in the router's line, in its order."""
    return sorted(router._waiters, key=lambda name: router._waiters[name].key)


def test_a_cancelled_waiter_does_not_hold_the_line() -> None:
    async def scenario(url: str) -> float:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": url, "models": ["llama-3.1-8b"], "max_concurrency": 1}]}
        )
        router = Router(inventory)
        async with Dispatcher(inventory, router) as dispatcher:

            async def call(name: str, priority: int, tokens: int) -> float:
                payload: dict[str, Any] = {
                    "model": "llama-3.1-8b",
                    "messages": [{"role": "user", "content": name}],
                    "max_tokens": tokens,
                }
                await dispatcher.chat(payload, priority=priority, slo_ttft_s=30.0, request_id=name)
                return time.monotonic()

            holder = asyncio.create_task(call("holder", 1, 30))  # about 0.3 s
            await asyncio.sleep(0.05)
            gone = asyncio.create_task(call("gone", 0, 3))  # class 0: first in line
            await asyncio.sleep(0.02)
            behind = asyncio.create_task(call("behind", 1, 3))
            await asyncio.sleep(0.02)
            assert _in_line(router) == ["gone", "behind"]
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)  # its cancellation has run
            assert _in_line(router) == ["behind"]  # withdrawn at once
            held_until = await holder
            done = await behind
            return done - held_until

    with SimServer(model_name="llama-3.1-8b", time_scale=1.0) as sim:
        lag = asyncio.run(scenario(sim.url))
    # With the withdrawal the waiter behind is served as the slot frees (a few tokens, well under
    # 0.5 s); without it, it waited for the cancelled one to time out of the line (about 1 s).
    assert lag < 0.8, lag


def test_a_freed_slot_wakes_only_the_waiters_it_goes_to(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every freed slot woke every waiting call, and each asked the router again: draining a line
    # of N costs N/2 route() calls per freed slot (150 for N = 300). With the dispatcher waking
    # only ``router.due(...)`` it is about 2.5.
    #
    # A waiter also asks again every FREED_WAIT_S (0.25 s) whatever frees: on a loaded machine the
    # drain takes seconds and those asks grow with it (4,035 seen at load 10, review R74), which
    # says nothing of who a freed slot wakes. Stretched past the drain (the router's line keeps a
    # waiter that long too), only the asks that freed slots cause are counted.
    from collections import Counter

    monkeypatch.setattr(dispatcher_module, "FREED_WAIT_S", 60.0)
    monkeypatch.setattr(router_module, "WAITER_TIMEOUT_S", 240.0)

    from test_dispatch_wakeup import CountingRouter

    n = 200

    async def scenario(url: str) -> Counter[str]:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": url, "models": ["llama-3.1-8b"], "max_concurrency": 1}]}
        )
        router = CountingRouter(inventory)
        router.asks = Counter()
        async with Dispatcher(inventory, router) as dispatcher:

            async def call(name: str, tokens: int) -> None:
                payload: dict[str, Any] = {
                    "model": "llama-3.1-8b",
                    "messages": [{"role": "user", "content": name}],
                    "max_tokens": tokens,
                }
                await dispatcher.chat(payload, priority=1, slo_ttft_s=600.0, request_id=name)

            holder = asyncio.create_task(call("holder", 20))
            await asyncio.sleep(0.05)
            await asyncio.gather(holder, *(call(f"w{i}", 1) for i in range(n)))
        return router.asks

    with SimServer(model_name="llama-3.1-8b", time_scale=0.01) as sim:
        asks = asyncio.run(scenario(sim.url))
    # Waking every waiter asks about n * n / 2 = 20,000 times; waking the due ones about 2.5 n,
    # whatever the load (the periodic asks are stretched out above): the bound tells the two apart.
    assert sum(asks.values()) <= 10 * n, sum(asks.values())
