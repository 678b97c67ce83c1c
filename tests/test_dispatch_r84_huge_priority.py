"""Review R84: a priority class is any whole number >= 0 (``Dispatcher.route_request``, or a
``RouteRequest`` made directly), and the router's shed messages wrote it as ``class {priority}``:
a class of more than 4,300 digits, which Python will not write, made the shed a ``ValueError``
instead of ``Shed``. Each shed now quotes the class as ``_shown.quoted`` does, by its size past
128 bits; a class of a few digits reads as before."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from test_dispatch_router import pool, req

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.metrics import EngineLoad
from agentgate.dispatch.router import Router
from agentgate.errors import Shed

HUGE = 10**5000


def test_a_huge_class_is_shed_when_every_backend_is_at_its_max_concurrency() -> None:
    router = Router(pool(1, max_concurrency=1))
    assert router.route(req(0, priority=0), 0.0).action == "dispatch"
    with pytest.raises(Shed, match=r"max_concurrency; class an integer of 16610 bits shed$"):
        router.route(req(1, priority=HUGE), 0.0)
    with pytest.raises(Shed, match=r"max_concurrency; class 7 shed$"):
        router.route(req(2, priority=7), 0.0)


def test_a_huge_class_is_shed_when_its_slo_cannot_be_met() -> None:
    router = Router(pool(1))
    router.observe("b0", EngineLoad(running=0.0, waiting=1e7, kv_usage=0.0, scraped_at=0.0))
    with pytest.raises(Shed, match=r"cannot be met .*; class an integer of 16610 bits shed$"):
        router.route(req(0, prompt=4000, priority=HUGE), 0.0)


def test_a_dispatcher_call_of_a_huge_class_is_shed_not_a_value_error() -> None:
    release = asyncio.Event()

    async def chat(_: web.Request) -> web.Response:
        await release.wait()
        return web.json_response(
            {
                "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            }
        )

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/health", health)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {"name": "b", "url": f"http://127.0.0.1:{port}", "models": ["m"], "max_concurrency": 1}
                ]
            }
        )
        payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        try:
            async with Dispatcher(inventory, Router(inventory)) as dispatcher:
                first = asyncio.create_task(dispatcher.chat(payload))  # holds the only slot
                while dispatcher.router.in_flight("b") == 0:
                    await asyncio.sleep(0.01)
                try:
                    with pytest.raises(Shed, match="class an integer of 16610 bits shed"):
                        await dispatcher.chat(payload, priority=HUGE)
                finally:
                    release.set()
                assert (await first).content == "ok"
        finally:
            await runner.cleanup()

    asyncio.run(main())
